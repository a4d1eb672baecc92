package framework

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A Balancer sends each new connection to the next ready backend, and to
// every backend when none is ready.
func TestBalancer(t *testing.T) {
	var ready [2]atomic.Bool
	var backends [2]*httptest.Server
	for i := range backends {
		name := string(rune('a' + i))
		backends[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" && !ready[i].Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, name)
		}))
		defer backends[i].Close()
	}
	ready[0].Store(true)
	b, err := StartBalancer([]string{strings.TrimPrefix(backends[0].URL, "http://"), strings.TrimPrefix(backends[1].URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	answers := func(n int) string {
		t.Helper()
		var got strings.Builder
		for range n {
			resp, err := client.Get(b.URL() + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got.Write(body)
		}
		return got.String()
	}
	waitReady := func(want ...bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			return b.Ready(0) == want[0] && b.Ready(1) == want[1], nil
		})
		if err != nil {
			t.Fatalf("balancer never saw readiness %v", want)
		}
	}

	waitReady(true, false)
	if got := answers(4); got != "aaaa" {
		t.Errorf("only a ready: answers %q, want aaaa", got)
	}
	ready[1].Store(true)
	waitReady(true, true)
	if got := answers(4); strings.Count(got, "a") != 2 || strings.Count(got, "b") != 2 {
		t.Errorf("both ready: answers %q, want two of each in turn", got)
	}
	ready[0].Store(false)
	ready[1].Store(false)
	waitReady(false, false)
	if got := answers(4); strings.Count(got, "a") != 2 || strings.Count(got, "b") != 2 {
		t.Errorf("none ready: answers %q, want every backend in turn", got)
	}
	if n := b.Connections(); n != 12 {
		t.Errorf("balancer accepted %d connections, want 12", n)
	}
}

// DropConnections ends every open connection, a streaming one included,
// and the balancer goes on accepting new ones.
func TestBalancerDropConnections(t *testing.T) {
	started := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			return
		}
		w.(http.Flusher).Flush()
		started <- struct{}{}
		<-r.Context().Done() // a stream that only ends when its connection does
	}))
	defer backend.Close()
	b, err := StartBalancer([]string{strings.TrimPrefix(backend.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	resp, err := client.Get(b.URL() + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-started
	if n := b.DropConnections(); n != 2 {
		t.Errorf("DropConnections closed %d connections, want 2 (client and backend side)", n)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("the stream ended cleanly, want its connection cut")
	}
	resp2, err := client.Get(b.URL() + "/readyz")
	if err != nil {
		t.Fatalf("a new connection after the drop: %v", err)
	}
	resp2.Body.Close()
}
