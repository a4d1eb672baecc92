package freshness

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Integration tests against a real etcd (see startEtcd).

// newEtcdChecker returns a running Checker for client; it stops when the
// test ends.
func newEtcdChecker(t *testing.T, client *clientv3.Client) *Checker {
	t.Helper()
	c, err := New(Config{Client: client, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return c
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func put(t *testing.T, client *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := client.Put(testContext(t), key, "v")
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return resp.Header.Revision
}

func del(t *testing.T, client *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := client.Delete(testContext(t), key)
	if err != nil {
		t.Fatalf("delete %q: %v", key, err)
	}
	return resp.Header.Revision
}

func currentRevision(t *testing.T, c *Checker) int64 {
	t.Helper()
	rev, err := c.CurrentRevision(testContext(t))
	if err != nil {
		t.Fatalf("CurrentRevision: %v", err)
	}
	return rev
}

func lastChange(t *testing.T, tr *Tracker, rev int64) int64 {
	t.Helper()
	l, err := tr.LastChangeAtOrBefore(testContext(t), rev)
	if err != nil {
		t.Fatalf("LastChangeAtOrBefore(%d): %v", rev, err)
	}
	return l
}

func TestNewRequiresClient(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a client succeeded")
	}
}

func TestEtcdCurrentRevision(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)

	for range 3 {
		want := put(t, client, "/registry/pods/default/a")
		if got := currentRevision(t, c); got != want {
			t.Errorf("CurrentRevision() = %d, want %d (last put)", got, want)
		}
	}
}

func TestEtcdTrackLastChange(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	from := currentRevision(t, c)
	tr := c.Track("/registry/pods/", from)
	defer tr.Stop()

	r1 := put(t, client, "/registry/pods/default/a")
	r2 := put(t, client, "/registry/services/specs/default/x") // elsewhere
	r3 := put(t, client, "/registry/pods/default/b")
	r4 := del(t, client, "/registry/pods/default/a")
	r5 := put(t, client, "/registry/podtemplates/default/t") // shares "/registry/pod"

	want := map[int64]int64{from: from, r1: r1, r2: r1, r3: r3, r4: r4, r5: r4}
	got := map[int64]int64{}
	for _, rev := range []int64{from, r1, r2, r3, r4, r5} {
		got[rev] = lastChange(t, tr, rev)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("L by revision (-want +got):\n%s", diff)
	}
	if got := tr.Baseline(); got != from {
		t.Errorf("Baseline() = %d, want %d", got, from)
	}
}

// The stores of one resource share one Tracker (one etcd watch) per prefix;
// it answers for each of them, keeps running while any uses it, and stops
// with the last.
func TestEtcdTrackShared(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	from := currentRevision(t, c)
	t1, release1 := c.TrackShared("/registry/pods/", from)
	r1 := put(t, client, "/registry/pods/default/a")
	t2, release2 := c.TrackShared("/registry/pods/", r1)
	if t1 != t2 {
		t.Fatal("two stores of one prefix got two trackers")
	}
	other, releaseOther := c.TrackShared("/registry/configmaps/", from)
	defer releaseOther()
	if other == t1 {
		t.Fatal("two prefixes share a tracker")
	}

	release1()
	release1() // idempotent: does not release the other user's share
	r2 := put(t, client, "/registry/pods/default/b")
	r3 := put(t, client, "/registry/services/specs/default/x")
	if got := lastChange(t, t2, r3); got != r2 {
		t.Errorf("after one release, L(%d) = %d, want %d", r3, got, r2)
	}
	select {
	case <-t2.done:
		t.Fatal("the tracker stopped while a store still uses it")
	default:
	}

	release2()
	<-t2.done
	t3, release3 := c.TrackShared("/registry/pods/", r3)
	defer release3()
	if t3 == t2 {
		t.Error("a stopped tracker was handed out again")
	}
}

// waitForWaiter yields until some LastChangeAtOrBefore waits for progress.
func waitForWaiter(t *testing.T, c *Checker) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !c.waitingForProgress() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for a waiter")
		}
		runtime.Gosched()
	}
}

func TestEtcdWaitForFutureRevisionIsWoken(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	cur := currentRevision(t, c)
	tr := c.Track("/registry/pods/", cur)
	defer tr.Stop()

	type result struct {
		l   int64
		err error
	}
	out := make(chan result, 1)
	go func() {
		l, err := tr.LastChangeAtOrBefore(testContext(t), cur+2)
		out <- result{l, err}
	}()
	waitForWaiter(t, c)
	empty(t, out, "answer for a future revision")

	r1 := put(t, client, "/registry/pods/default/a")
	r2 := put(t, client, "/registry/configmaps/default/b")
	if r2 != cur+2 {
		t.Fatalf("puts at %d, %d; want %d, %d", r1, r2, cur+1, cur+2)
	}
	if got := recv(t, out, "answer"); got != (result{l: r1}) {
		t.Errorf("got %+v, want L=%d", got, r1)
	}
}

func TestEtcdQuietPrefixAnswersPromptly(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	cur := currentRevision(t, c)
	prefixes := []string{"/registry/quiet-a/", "/registry/quiet-b/", "/registry/quiet-c/"}
	var trackers []*Tracker
	for _, p := range prefixes {
		tr := c.Track(p, cur)
		defer tr.Stop()
		trackers = append(trackers, tr)
	}

	for round := range 3 {
		// Only a write elsewhere advances the revision: the trackers'
		// watches see no event and must be told of progress.
		e := put(t, client, "/registry/configmaps/default/noise")
		before := testutil.ToFloat64(c.metrics.progressRequests)
		var wg sync.WaitGroup
		for _, tr := range trackers {
			wg.Go(func() {
				start := time.Now()
				l, err := tr.LastChangeAtOrBefore(testContext(t), e)
				took := time.Since(start)
				t.Logf("round %d: %s answered L=%d for E=%d in %v", round, tr.Prefix(), l, e, took)
				if err != nil || l != cur {
					t.Errorf("%s: LastChangeAtOrBefore(%d) = %d, %v; want %d, nil", tr.Prefix(), e, l, err, cur)
				}
				if took >= 2*time.Second {
					t.Errorf("%s: answered in %v, want < 2s", tr.Prefix(), took)
				}
			})
		}
		wg.Wait()
		t.Logf("round %d: %v progress requests for %d waiters", round, testutil.ToFloat64(c.metrics.progressRequests)-before, len(trackers))
	}
}

func TestEtcdCompaction(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	ctx := testContext(t)

	if got, err := c.RefreshCompaction(ctx); got != 0 || err != nil {
		t.Fatalf("RefreshCompaction() before compaction = %d, %v; want 0, nil", got, err)
	}
	var rev int64
	for range 5 {
		rev = put(t, client, "/registry/pods/default/a")
	}
	if _, err := client.Compact(ctx, rev-1); err != nil {
		t.Fatalf("compact: %v", err)
	}
	got, err := c.RefreshCompaction(ctx)
	if err != nil || got != rev-1 {
		t.Fatalf("RefreshCompaction() = %d, %v; want %d, nil", got, err, rev-1)
	}
	if got := c.CompactedRevision(); got != rev-1 {
		t.Errorf("CompactedRevision() = %d, want %d", got, rev-1)
	}
	if got := testutil.ToFloat64(c.metrics.compactedRevision); got != float64(rev-1) {
		t.Errorf("compacted_revision gauge = %v, want %d", got, rev-1)
	}
}

func TestEtcdTrackFromCompactedRevision(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	const prefix = "/registry/pods/"

	var revs []int64 // revs[i]: the i-th put under prefix
	for range 5 {
		revs = append(revs, put(t, client, prefix+"default/a"))
	}
	compactAt := revs[3]
	if _, err := client.Compact(testContext(t), compactAt); err != nil {
		t.Fatalf("compact: %v", err)
	}

	t.Run("history_lost_moves_baseline_to_current", func(t *testing.T) {
		cur := currentRevision(t, c)
		tr := c.Track(prefix, revs[0])
		defer tr.Stop()
		if got := lastChange(t, tr, cur); got != cur {
			t.Errorf("L(%d) = %d, want the new baseline %d", cur, got, cur)
		}
		if got := tr.Baseline(); got != cur {
			t.Errorf("Baseline() = %d, want current revision %d", got, cur)
		}
		// Revisions before the baseline are unknown: answered conservatively.
		if got := lastChange(t, tr, revs[1]); got != revs[1] {
			t.Errorf("L(%d) = %d, want %d", revs[1], got, revs[1])
		}
		// Later changes are tracked as usual.
		r := put(t, client, prefix+"default/b")
		if got := lastChange(t, tr, r); got != r {
			t.Errorf("L(%d) = %d, want %d", r, got, r)
		}
		if got := c.CompactedRevision(); got != compactAt {
			t.Errorf("CompactedRevision() = %d, want %d (seen by the tracker's watch)", got, compactAt)
		}
	})

	t.Run("only_fromRev_compacted_loses_nothing", func(t *testing.T) {
		// The snapshot covers compactAt-1; every change after it is still
		// in etcd's history.
		tr := c.Track(prefix, compactAt-1)
		defer tr.Stop()
		if got := lastChange(t, tr, revs[4]); got != revs[4] {
			t.Errorf("L(%d) = %d, want %d", revs[4], got, revs[4])
		}
		if got := lastChange(t, tr, compactAt); got != compactAt {
			t.Errorf("L(%d) = %d, want %d", compactAt, got, compactAt)
		}
		if got := tr.Baseline(); got != compactAt-1 {
			t.Errorf("Baseline() = %d, want %d", got, compactAt-1)
		}
	})

	if got := testutil.ToFloat64(c.metrics.watchRestarts.WithLabelValues(restartCompacted)); got != 2 {
		t.Errorf("watch_restarts_total{reason=compacted} = %v, want 2", got)
	}
}

func TestEtcdCount(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	ctx := testContext(t)

	put(t, client, "/registry/pods/default/a")
	put(t, client, "/registry/pods/default/b")
	put(t, client, "/registry/podtemplates/default/t")
	at := put(t, client, "/registry/pods/kube-system/c")
	last := del(t, client, "/registry/pods/default/a")

	for _, tc := range []struct {
		name string
		rev  int64
		want int64
	}{
		{name: "at_revision", rev: at, want: 3},
		{name: "current", rev: 0, want: 2},
		{name: "latest_explicit", rev: last, want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Count(ctx, "/registry/pods/", tc.rev)
			if err != nil || got != tc.want {
				t.Errorf("Count(%d) = %d, %v; want %d, nil", tc.rev, got, err, tc.want)
			}
		})
	}

	if _, err := client.Compact(ctx, last); err != nil {
		t.Fatalf("compact: %v", err)
	}
	if _, err := c.Count(ctx, "/registry/pods/", at); !errors.Is(err, ErrCompacted) {
		t.Errorf("Count at a compacted revision: got %v, want ErrCompacted", err)
	}
}

// VerifyPrefix cannot pass vacuously: an empty resource proves nothing, and
// a prefix with as many keys as the snapshot has objects must still hold
// those objects.
func TestEtcdVerifyPrefix(t *testing.T) {
	client := startEtcd(t)
	c := newEtcdChecker(t, client)
	ctx := testContext(t)

	a := put(t, client, "/registry/pods/default/a")
	b := put(t, client, "/registry/pods/default/b")
	put(t, client, "/registry/metrics/default/a")
	m := put(t, client, "/registry/metrics/default/b")
	rev := m

	pods := PrefixContents{Count: 2, First: KeyRevision{"default/a", a}, Last: KeyRevision{"default/b", b}}
	for _, tc := range []struct {
		name    string
		prefix  string
		want    PrefixContents
		wantErr error
	}{
		{name: "right_prefix", prefix: "/registry/pods/", want: pods},
		{name: "empty_resource_wrong_prefix", prefix: "/registry/nothing/", want: PrefixContents{}, wantErr: ErrPrefixUnproven},
		{name: "empty_resource_right_prefix", prefix: "/registry/pods/", want: PrefixContents{}, wantErr: ErrPrefixUnproven},
		{name: "same_count_other_objects", prefix: "/registry/metrics/", want: pods, wantErr: ErrPrefixMismatch},
		{name: "count_differs", prefix: "/registry/nothing/", want: pods, wantErr: ErrPrefixMismatch},
		{name: "mod_revision_differs", prefix: "/registry/pods/", want: PrefixContents{Count: 2, First: KeyRevision{"default/a", a}, Last: KeyRevision{"default/b", b + 1}}, wantErr: ErrPrefixMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.VerifyPrefix(ctx, tc.prefix, rev, tc.want); !errors.Is(err, tc.wantErr) {
				t.Errorf("VerifyPrefix(%q) = %v, want %v", tc.prefix, err, tc.wantErr)
			}
		})
	}
}
