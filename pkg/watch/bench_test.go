package watch

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/listproxy/listproxy/pkg/snapshot"
	"github.com/listproxy/listproxy/pkg/wire"
)

// countingWriter is a ResponseWriter that drops what is written and
// signals done once it has seen want frames (JSON: lines).
type countingWriter struct {
	header http.Header
	frames atomic.Int64
	want   int64
	done   chan struct{}
	once   sync.Once
}

func (w *countingWriter) Header() http.Header { return w.header }
func (w *countingWriter) WriteHeader(int)     {}
func (w *countingWriter) Flush()              {}
func (w *countingWriter) Write(p []byte) (int, error) {
	if n := w.frames.Add(int64(bytes.Count(p, []byte("\n")))); n >= w.want {
		w.once.Do(func() { close(w.done) })
	}
	return len(p), nil
}

// BenchmarkFanOut: watchers of one store without selectors (the common
// informer) each get every change; one op is one change delivered to all
// of them. It measures the CPU the watch server spends per change.
func BenchmarkFanOut(b *testing.B) {
	for _, watchers := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			benchmarkFanOut(b, watchers)
		})
	}
}

func benchmarkFanOut(b *testing.B, watchers int) {
	pad := strings.Repeat("x", 3000) // about a pod's size
	item := func(rv uint64) *snapshot.Entry {
		raw := fmt.Sprintf(`{"apiVersion":"demo.listproxy.io/v1","kind":"Widget","metadata":{"name":"w1","namespace":"ns","resourceVersion":"%d"},"spec":{"pad":%q}}`, rv, pad)
		return snapshot.NewEntry("ns", "w1", rv, nil, nil, nil, []byte(raw))
	}
	store := snapshot.NewStore(snapshot.StoreConfig{EventHistory: 1 << 16})
	store.Replace([]*snapshot.Entry{item(1)}, 1)
	srv := NewServer(Config{})
	target := Target{Resource: "widgets.demo.listproxy.io", Format: wire.JSON, Type: widgetType, Store: store}
	q := "watch=1&resourceVersion=1&timeoutSeconds=3600"
	d := Decide(q)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	writers := make([]*countingWriter, watchers)
	for i := range writers {
		w := &countingWriter{header: http.Header{}, want: int64(b.N), done: make(chan struct{})}
		writers[i] = w
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/?"+q, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.Serve(w, r, d, target)
		}()
	}
	entries := make([]*snapshot.Entry, b.N)
	for i := range entries {
		entries[i] = item(uint64(i + 2))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i, e := range entries {
		store.Apply(snapshot.Change{Entry: e}, uint64(i+2))
	}
	for _, w := range writers {
		<-w.done
	}
	b.StopTimer()
	cancel()
	wg.Wait()
}
