package stores

import (
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// peerListTimeout bounds each page of a peer's list, as the apiserver's
// request timeout (60s) bounds a LIST: a peer that stops answering costs
// the store a minute before it lists from the apiserver, not its life.
const peerListTimeout = time.Minute

// newPeerClient returns the client of Config.Peer. It follows no redirect:
// client-go's transport adds the peer's credentials to every request it
// sends, so a followed redirect would hand them to any host and scheme the
// answer names. A redirect is a failed peer list (apiSource.do).
func newPeerClient(peer *rest.Config) (*http.Client, error) {
	client, err := rest.HTTPClientFor(withHealthCheckedTransport(peer))
	if err != nil {
		return nil, err
	}
	// A client of its own: HTTPClientFor may hand out http.DefaultClient.
	return &http.Client{
		Transport:     client.Transport,
		Timeout:       client.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}
