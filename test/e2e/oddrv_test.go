package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
	"github.com/listproxy/listproxy/test/framework"
)

// oddRVs are resourceVersions a caller may send that are no revision etcd
// has: beyond int64 (etcd's revisions) but within uint64 (what the
// apiserver parses), beyond uint64, and spellings of numbers that
// strconv.ParseUint refuses or reads as another number.
var oddRVs = []string{
	"9223372036854775807",  // 2^63-1
	"9223372036854775808",  // 2^63
	"18446744073709551615", // 2^64-1
	"18446744073709551616", // 2^64
	"-1", "abc", "01", " 5", "+5", "1e3",
}

// rvAnswer is what must match between the apiserver and listproxy: the
// status code, the Status of an error (in the body, or in a watch's ERROR
// event), and a watch's event types.
type rvAnswer struct {
	Code   int
	Reason metav1.StatusReason `json:",omitempty"`
	Status int32               `json:",omitempty"`
	Events []string            `json:",omitempty"`
}

// rvResult is an answer and what is only logged: the Status message, where
// it came from and how long it took.
type rvResult struct {
	answer     rvAnswer
	message    string
	servedFrom string
	took       time.Duration
}

func (r rvResult) String() string {
	b, _ := json.Marshal(r.answer)
	return fmt.Sprintf("%s from %s after %v: %.200q", b, r.servedFrom, r.took.Round(100*time.Millisecond), r.message)
}

// rvRequest sends one request and reduces its answer. A watch's stream is
// read to its end (timeoutSeconds); its events are reduced to their types,
// bookmarks counted once (the apiserver's periodic ones are timing).
func rvRequest(ctx context.Context, c rawClient, path string, q url.Values, watch bool) (rvResult, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return rvResult{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return rvResult{}, err
	}
	defer resp.Body.Close()
	res := rvResult{answer: rvAnswer{Code: resp.StatusCode}, servedFrom: resp.Header.Get(httpapi.HeaderServedFrom)}
	status := func(raw []byte) error {
		var st metav1.Status
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("status %q: %w", raw, err)
		}
		res.answer.Reason, res.answer.Status, res.message = st.Reason, st.Code, st.Message
		return nil
	}
	if !watch || resp.StatusCode != http.StatusOK {
		body, err := io.ReadAll(resp.Body)
		res.took = time.Since(start)
		if err != nil {
			return res, err
		}
		if resp.StatusCode != http.StatusOK {
			return res, status(body)
		}
		return res, nil
	}
	r := &frameReader{format: wire.JSON, br: bufio.NewReader(resp.Body)}
	bookmark := false
	for {
		fr, err := r.next()
		if errors.Is(err, io.EOF) {
			res.took = time.Since(start)
			return res, nil
		}
		if err != nil {
			return res, err
		}
		switch fr.typ {
		case wire.Bookmark:
			if !bookmark {
				res.answer.Events = append(res.answer.Events, string(fr.typ))
			}
			bookmark = true
		case wire.Error:
			res.answer.Events = append(res.answer.Events, string(fr.typ))
			var ev struct{ Object json.RawMessage }
			if err := json.Unmarshal(fr.raw, &ev); err != nil {
				return res, err
			}
			if err := status(ev.Object); err != nil {
				return res, err
			}
		default:
			res.answer.Events = append(res.answer.Events, string(fr.typ))
		}
	}
}

// TestOddResourceVersions: resourceVersions that are no etcd revision get
// from listproxy the apiserver's answer, for a watch, a watch-list, a LIST
// (not older than, with and without a limit) and an exact LIST; and none of
// them makes listproxy restart its own watch of the apiserver as if its
// store lagged behind etcd.
func TestOddResourceVersions(t *testing.T) {
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "odd-rv"
	createNamespaceWithPods(ctx, t, cp, ns, 2)
	lp := framework.StartListproxy(t, cp, "--serve-watches", "--etcd-servers="+cp.EtcdEndpoint, "--resources=pods",
		"--watch-lag-timeout=1s")
	lpc, apic := newRawClient(t, lp.Config()), newRawClient(t, cp.AdminConfig)
	path := "/api/v1/namespaces/" + ns + "/pods"
	warmUp(ctx, t, lpc, []target{{path: path}})

	kinds := []struct {
		name  string
		query url.Values
		watch bool
	}{
		{name: "watch", query: url.Values{"watch": {"1"}, "allowWatchBookmarks": {"true"}}, watch: true},
		{name: "watch_list", query: url.Values{"watch": {"1"}, "sendInitialEvents": {"true"},
			"resourceVersionMatch": {"NotOlderThan"}, "allowWatchBookmarks": {"true"}}, watch: true},
		{name: "list", query: url.Values{}},
		{name: "list_limit", query: url.Values{"limit": {"1"}}},
		{name: "list_exact_limit", query: url.Values{"resourceVersionMatch": {"Exact"}, "limit": {"1"}}},
	}
	type request struct {
		name  string
		query url.Values
		watch bool
	}
	var reqs []request
	for _, k := range kinds {
		for _, rv := range oddRVs {
			q := url.Values{"resourceVersion": {rv}}
			for name, v := range k.query {
				q[name] = v
			}
			if k.watch {
				q.Set("timeoutSeconds", "5")
			}
			reqs = append(reqs, request{name: k.name + "/" + rv, query: q, watch: k.watch})
		}
	}

	// Many answers take seconds (a wait for a revision, a watch to its
	// timeout): all at once.
	results := make([]rvResult, 2*len(reqs))
	err := framework.Parallel(ctx, 2*len(reqs), 2*len(reqs), func(ctx context.Context, i int) error {
		c := apic
		if i%2 == 1 {
			c = lpc
		}
		req := reqs[i/2]
		var err error
		results[i], err = rvRequest(ctx, c, path, req.query, req.watch)
		if err != nil {
			return fmt.Errorf("%s: %w", req.name, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range reqs {
		api, lpr := results[2*i], results[2*i+1]
		t.Logf("%s\n  apiserver: %v\n  listproxy: %v", req.name, api, lpr)
		if req.query.Has("sendInitialEvents") && api.answer.Code == http.StatusUnprocessableEntity && lpr.servedFrom == httpapi.SourceSnapshot {
			// An apiserver whose WatchList gate is off refuses every
			// explicit watch-list; listproxy serves those it can
			// (README "What is served from snapshots").
			continue
		}
		if diff := cmp.Diff(api.answer, lpr.answer); diff != "" {
			t.Errorf("%s (-apiserver +listproxy):\n%s", req.name, diff)
		}
	}

	// A lagging store's watch is restarted --watch-lag-timeout after etcd
	// proved the revision, which is before the proof gives up (3 s), so
	// such a restart would have been counted before the watches above
	// ended (5 s). None of these requests may count as such proof.
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_snapshot_watch_restarts_total", `reason="lagging"`); got != 0 {
		t.Errorf("listproxy_snapshot_watch_restarts_total{reason=lagging} = %v, want 0", got)
	}
}
