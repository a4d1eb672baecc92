package stores

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"

	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// apiSource reads one resource in one representation from the apiserver
// with listproxy's own credentials. It implements snapshot.Source.
type apiSource struct {
	client *http.Client
	host   string // scheme://host[:port][/prefix] of the apiserver
	path   string // cluster-wide collection path, e.g. /api/v1/pods
	format wire.Format
	custom bool
	// peer marks its requests as a peer's list (httpapi.HeaderPeerList).
	peer     bool
	envelope atomic.Pointer[wire.ListEnvelope] // of the last list, for responses
	// table is the Table state of a source of format Table, else nil.
	table *tableFeed
}

var _ snapshot.Source = (*apiSource)(nil)

// withHealthCheckedTransport returns upstream adjusted so that client-go
// builds a transport of its own. Given no TLS settings (an https server
// trusted through the system roots), no proxy and no dialer, client-go hands
// out the shared http.DefaultTransport, whose HTTP/2 connections have no
// health check; every list and watch of every store shares one such
// connection, and a dead one would hang them all until the kernel gives up
// on it (15 minutes and more). Its own transport goes through
// k8s.io/apimachinery/pkg/util/net.SetTransportDefaults, which pings an
// HTTP/2 connection idle for 30s and drops it if the ping is not answered
// in 15s (HTTP2_READ_IDLE_TIMEOUT_SECONDS, HTTP2_PING_TIMEOUT_SECONDS).
// http.ProxyFromEnvironment is what the transport uses anyway.
func withHealthCheckedTransport(upstream *rest.Config) *rest.Config {
	if upstream.Proxy != nil || upstream.Transport != nil || upstream.Dial != nil {
		return upstream
	}
	cfg := rest.CopyConfig(upstream)
	cfg.Proxy = http.ProxyFromEnvironment
	return cfg
}

func (s *apiSource) do(ctx context.Context, q url.Values, accept string) (*http.Response, error) {
	return s.doPath(ctx, s.path, q, accept)
}

// doPath sends a GET of path (under s.host) with query q, answered 200 or
// turned into an error.
func (s *apiSource) doPath(ctx context.Context, path string, q url.Values, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.host+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "listproxy")
	if s.peer {
		req.Header.Set(httpapi.HeaderPeerList, "true")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusGone:
		return nil, fmt.Errorf("%s: %s: %w", path, body, snapshot.ErrGone)
	case http.StatusNotFound:
		return nil, fmt.Errorf("%s: %s: %w", path, body, snapshot.ErrNotFound)
	}
	return nil, fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, body)
}

func (s *apiSource) List(ctx context.Context, limit int64, continueToken string, item func(raw []byte) error) (snapshot.ListResult, error) {
	q := url.Values{"limit": {strconv.FormatInt(limit, 10)}}
	if continueToken != "" {
		q.Set("continue", continueToken)
	}
	var env wire.ListEnvelope
	var err error
	if s.table != nil {
		env, err = s.listTable(ctx, q, continueToken, item)
	} else {
		env, err = s.list(ctx, q, item)
	}
	if err != nil {
		return snapshot.ListResult{}, err
	}
	s.envelope.Store(&env)
	return snapshot.ListResult{ResourceVersion: env.ListMeta.ResourceVersion, Continue: env.ListMeta.Continue}, nil
}

func (s *apiSource) list(ctx context.Context, q url.Values, item func(raw []byte) error) (wire.ListEnvelope, error) {
	resp, err := s.do(ctx, q, s.format.ListAccept())
	if err != nil {
		return wire.ListEnvelope{}, err
	}
	defer resp.Body.Close()
	return wire.DecodeList(s.format, resp.Body, item)
}

func (s *apiSource) Watch(ctx context.Context, rv string) (snapshot.Watch, error) {
	q := url.Values{
		"watch":               {"true"},
		"allowWatchBookmarks": {"true"},
		"resourceVersion":     {rv},
		// Like client-go's reflector: end watches at a random time between
		// 5 and 10 minutes so that apiserver load spreads.
		"timeoutSeconds": {strconv.Itoa(300 + rand.IntN(300))},
	}
	if s.table != nil {
		q.Set("includeObject", s.table.includeObject())
	}
	// The body is handed to the decoder, which the caller closes through
	// watchAdapter.Close; bodyclose cannot follow it there.
	resp, err := s.do(ctx, q, s.format.WatchAccept()) //nolint:bodyclose // closed by watchAdapter.Close
	if err != nil {
		return nil, err
	}
	dec := wire.NewWatchDecoder(s.format, resp.Body, wire.WatchOptions{StripTypeMeta: !s.custom && !s.format.IsMeta() && s.format != wire.Table})
	if s.table != nil {
		return tableWatch{watchAdapter: watchAdapter{dec}, table: s.table}, nil
	}
	return watchAdapter{dec}, nil
}

// watchAdapter turns wire events into snapshot events.
type watchAdapter struct{ d *wire.WatchDecoder }

func (w watchAdapter) Next() (snapshot.WatchEvent, error) {
	ev, err := w.d.Next()
	if err != nil {
		return snapshot.WatchEvent{}, err
	}
	return snapshot.WatchEvent{Type: snapshot.EventType(ev.Type), Object: ev.Object, ResourceVersion: ev.ResourceVersion}, nil
}

func (w watchAdapter) Close() error { return w.d.Close() }
