package framework

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A delayed watch body delivers every event once, in order, and drops
// bookmarks only when told to.
func TestDelayedBody(t *testing.T) {
	const stream = `{"type":"ADDED","object":{"metadata":{"resourceVersion":"2"}}}
{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"3"}}}
{"type":"MODIFIED","object":{"metadata":{"resourceVersion":"4"}}}
{"type":"DELETED","object":{"metadata":{"resourceVersion":"5"}}}
`
	lines := strings.SplitAfter(stream, "\n")
	for _, tc := range []struct {
		name string
		cfg  DelayProxyConfig
		want string
	}{
		{name: "unchanged", want: stream},
		{name: "delayed", cfg: DelayProxyConfig{MaxDelay: 20 * time.Millisecond}, want: stream},
		{name: "bookmarks_dropped", cfg: DelayProxyConfig{DropBookmarks: true}, want: lines[0] + lines[2] + lines[3]},
		{name: "delayed_without_bookmarks", cfg: DelayProxyConfig{MaxDelay: 20 * time.Millisecond, DropBookmarks: true}, want: lines[0] + lines[2] + lines[3]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &DelayProxy{cfg: tc.cfg}
			body := p.delay(context.Background(), io.NopCloser(strings.NewReader(stream)))
			defer body.Close()
			got, err := io.ReadAll(body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
		})
	}
}
