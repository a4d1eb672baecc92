package stores

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// peerListTimeout bounds each page of a peer's list, as the apiserver's
// request timeout (60s) bounds a LIST: a peer that stops answering costs
// the store a minute before it lists from the apiserver, not its life.
const peerListTimeout = time.Minute

// peerSampleSize is how many objects of a peer's list, drawn uniformly from
// the whole list, are read from the apiserver at the list's resourceVersion
// (peerSource.verify). Not measured: 16 reads of one key each cost the
// apiserver little beside one page of a list, and find a list of another
// cluster at once, and one that differs from the apiserver's in a tenth of
// its objects (beyond what the count shows) with probability
// 1 − 0.9^16 ≈ 81%.
const peerSampleSize = 16

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

// peerSource reads a store's first list from a peer replica, which answers
// a LIST as the apiserver does (the same items, envelope and
// resourceVersion); the envelope it reads is main's, which serves the
// store from then on. The list is trusted only once main's apiserver shows
// it to be its own at the list's resourceVersion (verify); until then the
// feeder has stored none of it, and a list it does not show so fails with
// snapshot.ErrWarmRejected: the store lists from the apiserver. A
// peerSource reads one list at a time, page by page (the feeder's first
// list); a first page starts over.
type peerSource struct {
	main *apiSource
	peer *apiSource
	// randN returns a number in [0, n) at random; nil selects rand.IntN.
	// Tests choose the sample with it.
	randN func(n int) int

	// The list read so far, from its first page on.
	rv      string       // the list's resourceVersion (its first page's)
	count   int64        // objects listed
	lastKey string       // the key (snapshot.ObjectKey) of the last one
	sample  []peerObject // up to peerSampleSize of them, drawn uniformly
}

var _ snapshot.Lister = (*peerSource)(nil)

// peerObject is an object of a peer's list, as the apiserver is asked for it.
type peerObject struct{ namespace, name, uid, rv string }

func (p *peerSource) List(ctx context.Context, limit int64, continueToken string, item func(raw []byte) error) (snapshot.ListResult, error) {
	ctx, cancel := context.WithTimeout(ctx, peerListTimeout)
	defer cancel()
	if continueToken == "" {
		p.rv, p.count, p.lastKey, p.sample = "", 0, "", nil
	}
	var newest uint64 // the largest resourceVersion of the page's objects
	res, err := p.peer.List(ctx, limit, continueToken, func(raw []byte) error {
		rv, err := p.observe(raw)
		if err != nil {
			return err
		}
		newest = max(newest, rv)
		return item(raw)
	})
	if err != nil {
		return res, err
	}
	if continueToken == "" {
		p.rv = res.ResourceVersion
	}
	listRV, err := strconv.ParseUint(p.rv, 10, 64)
	if err != nil {
		return snapshot.ListResult{}, fmt.Errorf("the peer's list resourceVersion %q: %w", p.rv, err)
	}
	if newest > listRV {
		return snapshot.ListResult{}, fmt.Errorf("%w: the peer lists an object at resourceVersion %d in its list at %d", snapshot.ErrWarmRejected, newest, listRV)
	}
	if res.Continue == "" {
		if err := p.verify(ctx); err != nil {
			return snapshot.ListResult{}, fmt.Errorf("%w: %w", snapshot.ErrWarmRejected, err)
		}
	}
	p.main.envelope.Store(p.peer.envelope.Load())
	return res, nil
}

// observe reads one object of the list: it must follow the last one in the
// apiserver's key order (which also rules out listing one twice), and it
// enters the sample by reservoir sampling, so that each object of the list
// is in it with the same chance. It returns the object's resourceVersion.
func (p *peerSource) observe(raw []byte) (uint64, error) {
	m, uid, err := wire.ExtractMetaUID(p.peer.format, raw)
	if err != nil {
		return 0, err
	}
	rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("object %s/%s: resourceVersion %q: %w", m.Namespace, m.Name, m.ResourceVersion, err)
	}
	key := snapshot.ObjectKey(m.Namespace, m.Name)
	if p.count > 0 && key <= p.lastKey {
		return 0, fmt.Errorf("%w: the peer lists %s after %s, not in the apiserver's order", snapshot.ErrWarmRejected, key, p.lastKey)
	}
	p.lastKey = key
	obj := peerObject{namespace: m.Namespace, name: m.Name, uid: uid, rv: m.ResourceVersion}
	if len(p.sample) < peerSampleSize {
		p.sample = append(p.sample, obj)
	} else if i := p.random(int(p.count) + 1); i < peerSampleSize {
		p.sample[i] = obj
	}
	p.count++
	return rv, nil
}

func (p *peerSource) random(n int) int {
	if p.randN != nil {
		return p.randN(n)
	}
	return rand.IntN(n)
}

// verify checks the whole list read with the apiserver, at the list's
// resourceVersion exactly: the apiserver held as many objects then as the
// peer listed (countAt; with the keys in order and distinct, an object
// missing or added shows), and each object of the sample with the same uid
// and resourceVersion (holdsAt). uids are random, so a peer in front of
// another cluster fails at its first sampled object even with the same
// names, and one ahead of this cluster at the count (the apiserver does not
// reach the resourceVersion); a peer whose store differs fails the count,
// or when the sample holds an object that differs. An empty list has
// nothing to show it is this cluster's (and lists cheaply from the
// apiserver).
func (p *peerSource) verify(ctx context.Context) error {
	if p.count == 0 {
		return errors.New("the peer's list is empty, nothing shows it is the apiserver's")
	}
	n, err := p.main.countAt(ctx, p.rv)
	if err != nil {
		return err
	}
	if n != p.count {
		return fmt.Errorf("the peer lists %d objects at resourceVersion %s, the apiserver held %d", p.count, p.rv, n)
	}
	for _, obj := range p.sample {
		if err := p.main.holdsAt(ctx, obj, p.rv); err != nil {
			return err
		}
	}
	return nil
}

// countAt returns how many objects the collection held at resourceVersion
// rv exactly: a LIST of one object at rv (resourceVersionMatch=Exact),
// whose remainingItemCount counts the others. The apiserver answers it from
// its watch cache while rv is in its history (ListFromCacheSnapshot,
// 1.34+), otherwise from etcd (one key read and a count of the keys at that
// revision); a compacted rv is 410 Gone, one it has not reached times out.
func (s *apiSource) countAt(ctx context.Context, rv string) (int64, error) {
	q := url.Values{
		"limit":                {"1"},
		"resourceVersion":      {rv},
		"resourceVersionMatch": {string(metav1.ResourceVersionMatchExact)},
	}
	resp, err := s.do(ctx, q, s.format.ListAccept())
	if err != nil {
		return 0, fmt.Errorf("counting the collection at resourceVersion %s with the apiserver: %w", rv, err)
	}
	defer resp.Body.Close()
	var n int64
	env, err := wire.DecodeList(s.format, resp.Body, func([]byte) error {
		n++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("counting the collection at resourceVersion %s with the apiserver: %w", rv, err)
	}
	if env.ListMeta.Continue == "" {
		return n, nil
	}
	if env.ListMeta.RemainingItemCount == nil {
		return 0, fmt.Errorf("the apiserver did not count the collection at resourceVersion %s", rv)
	}
	return n + *env.ListMeta.RemainingItemCount, nil
}

// holdsAt checks that the apiserver held obj, with its uid and
// resourceVersion, at resourceVersion rv exactly: a LIST of obj's name in
// its namespace at rv (resourceVersionMatch=Exact), which the apiserver
// answers with one read of the object's key at that revision in etcd.
func (s *apiSource) holdsAt(ctx context.Context, obj peerObject, rv string) error {
	p := s.path
	if obj.namespace != "" {
		dir, resource := path.Split(s.path)
		p = dir + "namespaces/" + url.PathEscape(obj.namespace) + "/" + resource
	}
	q := url.Values{
		"fieldSelector":        {fields.OneTermEqualSelector("metadata.name", obj.name).String()},
		"resourceVersion":      {rv},
		"resourceVersionMatch": {string(metav1.ResourceVersionMatchExact)},
	}
	resp, err := s.doPath(ctx, p, q, s.format.ListAccept())
	if err != nil {
		return fmt.Errorf("checking %s/%s with the apiserver: %w", obj.namespace, obj.name, err)
	}
	defer resp.Body.Close()
	found := false
	if _, err := wire.DecodeList(s.format, resp.Body, func(raw []byte) error {
		m, uid, err := wire.ExtractMetaUID(s.format, raw)
		found = found || (err == nil && uid != "" && uid == obj.uid && m.Namespace == obj.namespace && m.Name == obj.name && m.ResourceVersion == obj.rv)
		return err
	}); err != nil {
		return fmt.Errorf("checking %s/%s with the apiserver: %w", obj.namespace, obj.name, err)
	}
	if !found {
		return fmt.Errorf("the apiserver held no %s/%s with uid %s at resourceVersion %s when at %s: the peer's list is not the apiserver's (a peer in front of another cluster, or a store that differs)", obj.namespace, obj.name, obj.uid, obj.rv, rv)
	}
	return nil
}
