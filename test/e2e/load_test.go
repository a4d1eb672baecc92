package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/test/framework"
)

// Load acceptance tests: a storm of concurrent full LISTs
// costs listproxy bounded memory (bounded in-flight responses, streamed; the
// excess gets 429 with Retry-After, never passed through), and a client that
// stops reading holds neither other requests nor the snapshot writer, only
// its own slot until --list-write-timeout.

const (
	loadNamespace = "load"
	// loadItemMarker begins every seeded pod in a JSON PodList (metadata
	// first, name first), and nothing else in it.
	loadItemMarker   = `{"metadata":{"name":"load-`
	loadStormClients = 200
	// The storm's bounds: far below what 200 full lists need, so most of
	// them queue. 128 MiB is three full lists of 30k pods of ~1.4 KB.
	loadMaxInflightLists = 8
	loadMaxInflightBytes = 128 << 20
	loadQueueWait        = 2 * time.Second
	// Several times what an admitted storm response takes on a busy 2-core
	// machine under -race (well under a second once gzip chunks are
	// cached); the slow reader waits it out.
	loadWriteTimeout = 8 * time.Second
)

// loadPods is how many pods TestLoad seeds: $LISTPROXY_LOAD_PODS, default 30000.
func loadPods(t *testing.T) int {
	t.Helper()
	v := os.Getenv("LISTPROXY_LOAD_PODS")
	if v == "" {
		return 30000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("LISTPROXY_LOAD_PODS=%q: want a positive number", v)
	}
	return n
}

// TestLoad seeds one cluster of small pods and starts one listproxy with
// in-flight bounds far below the storm's needs, then runs the storm and the
// slow reader against it. (Seeding and listproxy's first sync under -race
// take most of the time; the two parts share them.)
func TestLoad(t *testing.T) {
	n := loadPods(t)
	cp := framework.Start(t, framework.ControlPlaneConfig{})
	ctx := context.Background()
	if err := cp.CreateNamespace(ctx, loadNamespace, nil); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	seedLoadPods(ctx, t, cp, n)
	t.Logf("created %d pods in %v", n, time.Since(begin).Round(time.Millisecond))

	// Consistent reads whose freshness is not proven in time get 429 rather
	// than passing through: no answer of the storm may come from the
	// apiserver.
	lp := framework.StartListproxy(t, cp,
		"--resources=pods", "--etcd-servers="+cp.EtcdEndpoint, "--consistent-read-fallback=reject",
		"--max-inflight-lists="+strconv.Itoa(loadMaxInflightLists),
		"--max-inflight-list-bytes="+strconv.Itoa(loadMaxInflightBytes),
		"--list-queue-wait="+loadQueueWait.String(),
		"--list-write-timeout="+loadWriteTimeout.String())
	lpc := newRawClient(t, lp.Config())
	begin = time.Now()
	waitServedFromSnapshot(ctx, t, lpc, "/api/v1/pods", url.Values{"resourceVersion": {"0"}, "limit": {"1"}})
	waitServedFromSnapshot(ctx, t, lpc, "/api/v1/pods", url.Values{"limit": {"1"}})
	t.Logf("listproxy synced in %v", time.Since(begin).Round(time.Millisecond))
	// gzip responses are stitched from per-object chunks compressed on
	// first use (~10 s for the first full list here under -race; retried if
	// the write deadline cuts it short). The storm measures the steady state.
	begin = time.Now()
	awaitGzipFullList(ctx, t, lp.URL+"/api/v1/pods", url.Values{"resourceVersion": {"0"}}, n)
	t.Logf("gzip chunks built in %v", time.Since(begin).Round(time.Millisecond))

	t.Run("storm", func(t *testing.T) { testLoadStorm(ctx, t, cp, lp, n) })
	t.Run("slow_reader", func(t *testing.T) { testLoadSlowReader(ctx, t, cp, lp, n) })
	if err := lp.Stop(); err != nil {
		t.Errorf("stop the in-process listproxy: %v", err)
	}
	t.Run("storm_process_rss", func(t *testing.T) { testLoadStormRSS(ctx, t, cp, n) })
}

// seedLoadPods creates n pods of about 1.4 KB each as the apiserver stores
// them (no service account token volume, one toleration instead of the two
// the apiserver would add), posting pre-encoded JSON: client-side encoding
// under -race would otherwise cost more than the apiserver.
func seedLoadPods(ctx context.Context, t *testing.T, cp *framework.ControlPlane, n int) {
	t.Helper()
	client, err := rest.HTTPClientFor(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	u := cp.AdminConfig.Host + "/api/v1/namespaces/" + loadNamespace + "/pods"
	err = framework.Parallel(ctx, 16, n, func(ctx context.Context, i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(loadPodJSON(fmt.Sprintf("load-%05d", i), i)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusCreated {
			err = fmt.Errorf("create pod %d: HTTP %d: %q", i, resp.StatusCode, body)
		}
		return err
	})
	if err != nil {
		t.Fatalf("seeding pods: %v", err)
	}
}

func loadPodJSON(name string, i int) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":{"app":"load","shard":"%d"}},`+
		`"spec":{"nodeName":"node-%d","automountServiceAccountToken":false,"tolerations":[{"operator":"Exists"}],"containers":[{"name":"c","image":"pause"}]}}`,
		name, i%16, i%100)
}

// testLoadStorm: 200 concurrent full LISTs against a listproxy whose bounds
// admit a few at a time. Every answer is a complete list of every pod or a
// 429 with Retry-After and a Status, none passes through (the apiserver's
// audit log shows no LIST of pods meanwhile), and the Go heap of
// this process (listproxy runs in it) stays within a bound that does not
// depend on the number of clients.
func testLoadStorm(ctx context.Context, t *testing.T, cp *framework.ControlPlane, lp *framework.Listproxy, n int) {
	const path = "/api/v1/pods"
	// The bytes of a full list decide how many the byte bound admits at once.
	listBytes := framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_snapshot_bytes", `resource="pods"`, `format="json"`)
	admitted := min(loadMaxInflightLists, max(1, int(loadMaxInflightBytes/listBytes)))
	timeoutsBefore := framework.Scrape(t, nil, lp.URL+"/metrics").Sum("listproxy_lists_write_timeouts_total")
	// Live heap with the snapshots loaded and nothing in flight.
	runtime.GC()
	baseline := heapLive()
	apiserverListsBefore := apiserverLists(t, cp, "pods")

	stopSampling := sampleHeap()
	results, elapsed := runStorm(ctx, lp.URL+path)
	peak := stopSampling()

	counts := map[string]int{}
	limiterRejections := 0
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("client %d: %v", i, r.err)
		case r.servedFrom != "snapshot":
			t.Errorf("client %d: HTTP %d answered by %q, want listproxy's snapshot side (never passed through)", i, r.code, r.servedFrom)
		case r.code == http.StatusOK:
			if r.items != n || !bytes.HasPrefix(r.head, []byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"`)) || !bytes.HasSuffix(r.tail, []byte("]}\n")) {
				t.Errorf("client %d: 200 with %d of %d pods in %d bytes, starting %q, ending %q; want a complete PodList", i, r.items, n, r.bytes, r.head, r.tail)
			}
		case r.code == http.StatusTooManyRequests:
			if r.retryAfter == "" || r.status.Kind != "Status" || r.status.Code != http.StatusTooManyRequests ||
				r.status.Reason != metav1.StatusReasonTooManyRequests || r.status.Details == nil || r.status.Details.RetryAfterSeconds < 1 {
				t.Errorf("client %d: 429 with Retry-After %q and Status %+v; want Retry-After and a TooManyRequests Status with retryAfterSeconds", i, r.retryAfter, r.status)
			}
			if r.status.Message == "Too many requests, please try again later." {
				limiterRejections++
			}
		default:
			t.Errorf("client %d: HTTP %d, want 200 or 429", i, r.code)
		}
		counts[strconv.Itoa(r.code)]++
		if r.gzipped && r.code == http.StatusOK {
			counts["200_gzip"]++
		}
	}
	t.Logf("%d concurrent full LISTs in %v: %v by code (%d rejected by the in-flight bound, the rest of the 429s by the consistent-read fallback)",
		loadStormClients, elapsed.Round(time.Millisecond), counts, limiterRejections)
	if counts["200"] == 0 {
		t.Errorf("no LIST of the storm succeeded")
	}

	// Bound: what a collection finds live is the baseline plus what is in
	// flight, and between collections the heap grows to (1 + GOGC/100)
	// times that. In flight, per admitted response listproxy holds the
	// page's item pointers and the slices it writes (40 B per item,
	// counting the page's growth) and a gzip writer (1 MiB); per connection
	// both sides hold read and write buffers and the client a copy buffer
	// (64 KiB); and 16 MiB of slack for the runtime and metrics scrapes.
	// Only connection buffers grow with the number of clients, never
	// response bytes. (Unbounded, --max-inflight-lists=0
	// --max-inflight-list-bytes=0, 30k pods: 150 MiB live against a bound
	// of 103, and the CPU so busy that every consistent read fell back.)
	allowance := uint64(admitted*(40*n+1<<20) + loadStormClients*64<<10 + 16<<20)
	liveBound := baseline + allowance
	bound := uint64((1 + gcPercent()/100) * float64(liveBound))
	t.Logf("Go heap: live %d MiB before the storm; during it at most %d MiB live (bound %d MiB) and %d MiB of objects (bound %d MiB); %d full lists of %d MiB admitted at once",
		baseline>>20, peak.live>>20, liveBound>>20, peak.objects>>20, bound>>20, admitted, int(listBytes)>>20)
	if peak.live > liveBound {
		t.Errorf("live heap reached %d MiB during the storm, want at most %d MiB (%d MiB before + %d MiB in flight)", peak.live>>20, liveBound>>20, baseline>>20, allowance>>20)
	}
	if peak.objects > bound {
		t.Errorf("Go heap peaked at %d MiB during the storm, want at most %d MiB ((1 + GOGC/100) × (%d MiB live before + %d MiB in flight))", peak.objects>>20, bound>>20, baseline>>20, allowance>>20)
	}

	// The apiserver saw none of the storm (its audit log: every LIST of
	// pods it served).
	if got := apiserverLists(t, cp, "pods") - apiserverListsBefore; got != 0 {
		t.Errorf("the apiserver served %d LISTs of pods during the storm, want 0", got)
	}

	// Everything admitted was released.
	awaitMetric(ctx, t, lp.URL, 30*time.Second, 0, "listproxy_lists_inflight")
	awaitMetric(ctx, t, lp.URL, 30*time.Second, 0, "listproxy_lists_queued")
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	if got := m.Sum("listproxy_lists_rejected_total"); got != float64(limiterRejections) {
		t.Errorf("listproxy_lists_rejected_total = %v, want %d (the in-flight bound's 429s)", got, limiterRejections)
	}
	if got := m.Sum("listproxy_lists_inflight_bytes"); got != 0 {
		t.Errorf("listproxy_lists_inflight_bytes = %v after the storm, want 0", got)
	}
	if got := m.Sum("listproxy_lists_write_timeouts_total"); got != timeoutsBefore {
		t.Errorf("listproxy_lists_write_timeouts_total went from %v to %v during the storm, want no admitted response cut short", timeoutsBefore, got)
	}
}

// awaitGzipFullList repeats a gzipped full JSON LIST of u?q until one is
// complete with n items: the first builds the gzip chunks (retried if the
// write deadline cuts it short).
func awaitGzipFullList(ctx context.Context, t *testing.T, u string, q url.Values, n int) {
	t.Helper()
	plain := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer plain.CloseIdleConnections()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		r := stormList(ctx, plain, u, q, true)
		return r.err == nil && r.code == http.StatusOK && r.items == n, nil
	})
	if err != nil {
		t.Fatalf("no complete gzip full list (%v): %v", q, err)
	}
}

// runStorm sends loadStormClients full JSON LISTs of u at once: half at
// resourceVersion=0, half consistent, a quarter of all gzipped.
func runStorm(ctx context.Context, u string) ([]stormResult, time.Duration) {
	transport := &http.Transport{MaxIdleConnsPerHost: loadStormClients, DisableCompression: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	begin := time.Now()
	results := make([]stormResult, loadStormClients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := url.Values{"resourceVersion": {"0"}}
			if i%2 == 1 {
				q = nil // consistent
			}
			<-start
			results[i] = stormList(ctx, client, u, q, i%4 == 3)
		}()
	}
	close(start)
	wg.Wait()
	return results, time.Since(begin)
}

// testLoadStormRSS: the same storm against listproxy as its own process,
// the binary a Deployment runs with its shipped GOGC. Its resident set
// during the storm stays below what it held with the store loaded and its
// gzip chunks built, plus --max-inflight-list-bytes: responses are streamed
// from the stored bytes, and the excess waits or gets 429.
func testLoadStormRSS(ctx context.Context, t *testing.T, cp *framework.ControlPlane, n int) {
	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	rs := startReplicaSet(startCtx, t, cp, 1,
		"--resources=pods", "--preload=pods/json", "--etcd-servers="+cp.EtcdEndpoint, "--consistent-read-fallback=reject",
		"--consistency-check-interval=0",
		"--max-inflight-lists="+strconv.Itoa(loadMaxInflightLists),
		"--max-inflight-list-bytes="+strconv.Itoa(loadMaxInflightBytes),
		"--list-queue-wait="+loadQueueWait.String(),
		"--list-write-timeout="+loadWriteTimeout.String())
	r := rs.Replicas[0]
	u := r.URL() + "/api/v1/pods"
	// What a replica serving this storm holds anyway: the store, and the
	// gzip chunks of its first gzip list; one consistent read proven.
	for _, q := range []url.Values{{"resourceVersion": {"0"}}, nil} {
		awaitGzipFullList(ctx, t, u, q, n)
	}
	before, err := r.RSS()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ResetPeakRSS(); err != nil {
		t.Fatal(err)
	}
	results, elapsed := runStorm(ctx, u)
	peak := r.PeakRSS()
	ok := 0
	for i, res := range results {
		switch {
		case res.err != nil:
			t.Errorf("client %d: %v", i, res.err)
		case res.code == http.StatusOK && res.items == n:
			ok++
		case res.code != http.StatusTooManyRequests:
			t.Errorf("client %d: HTTP %d with %d of %d pods, want a complete list or 429", i, res.code, res.items, n)
		}
	}
	bound := before + loadMaxInflightBytes
	t.Logf("listproxy process: RSS %d MiB with the store loaded; peak %d MiB during %d concurrent full LISTs (%d complete) in %v; bound %d MiB (+ --max-inflight-list-bytes)",
		before>>20, peak>>20, loadStormClients, ok, elapsed.Round(time.Millisecond), bound>>20)
	if ok == 0 {
		t.Error("no LIST of the storm succeeded")
	}
	if peak > bound {
		t.Errorf("peak RSS %d MiB during the storm, want at most %d MiB (%d MiB before + %d MiB --max-inflight-list-bytes)", peak>>20, bound>>20, before>>20, loadMaxInflightBytes>>20)
	}
}

// stormResult is one storm client's answer.
type stormResult struct {
	code       int
	servedFrom string
	retryAfter string
	status     metav1.Status // 429
	gzipped    bool
	items      int // 200: loadItemMarker occurrences
	bytes      int64
	head, tail []byte
	err        error
}

// stormList sends one JSON LIST and reads its body as it streams, without
// keeping it.
func stormList(ctx context.Context, client *http.Client, u string, q url.Values, gzipped bool) stormResult {
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return stormResult{err: err}
	}
	req.Header.Set("Accept", acceptJSON)
	if gzipped {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := client.Do(req)
	if err != nil {
		return stormResult{err: err}
	}
	defer resp.Body.Close()
	r := stormResult{code: resp.StatusCode, servedFrom: resp.Header.Get("X-Listproxy-Served-From"), retryAfter: resp.Header.Get("Retry-After")}
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		r.gzipped = true
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			r.err = err
			return r
		}
		body = zr
	}
	if r.code != http.StatusOK {
		data, err := io.ReadAll(body)
		if err == nil {
			err = json.Unmarshal(data, &r.status)
		}
		r.err = err
		return r
	}
	c := &markerCounter{marker: []byte(loadItemMarker)}
	_, r.err = io.Copy(c, body)
	r.items, r.bytes, r.head, r.tail = c.count, c.n, c.head, c.tail
	return r
}

// markerCounter counts occurrences of marker in what is written to it, and
// keeps the first and last bytes.
type markerCounter struct {
	marker     []byte
	count      int
	n          int64
	head, tail []byte
	carry      []byte // the last len(marker)-1 bytes written
}

func (c *markerCounter) Write(p []byte) (int, error) {
	m := len(c.marker)
	// Occurrences across the previous write and this one.
	edge := append(append(make([]byte, 0, 2*m), c.carry...), p[:min(len(p), m-1)]...)
	c.count += bytes.Count(edge, c.marker) + bytes.Count(p, c.marker)
	c.carry = append(c.carry, p...)
	c.carry = append(c.carry[:0], c.carry[max(0, len(c.carry)-(m-1)):]...)
	if len(c.head) < 128 {
		c.head = append(c.head, p[:min(len(p), 128-len(c.head))]...)
	}
	c.tail = append(c.tail, p[max(0, len(p)-16):]...)
	c.tail = append(c.tail[:0], c.tail[max(0, len(c.tail)-16):]...)
	c.n += int64(len(p))
	return len(p), nil
}

// gcPercent is this process's GOGC.
func gcPercent() float64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64())
}

// heapLive is the live heap as of the last collection.
func heapLive() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// heapPeaks are the largest heap sizes seen while sampling.
type heapPeaks struct {
	objects uint64 // live and not yet collected objects
	live    uint64 // marked live by a collection
}

// sampleHeap samples the heap every few milliseconds until the returned func
// is called; that returns the peaks.
func sampleHeap() func() heapPeaks {
	stop, done := make(chan struct{}), make(chan heapPeaks)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		var peaks heapPeaks
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			peaks.objects = max(peaks.objects, s[0].Value.Uint64())
			peaks.live = max(peaks.live, s[1].Value.Uint64())
			select {
			case <-stop:
				done <- peaks
				return
			case <-tick.C:
			}
		}
	}()
	return func() heapPeaks {
		close(stop)
		return <-done
	}
}

// awaitMetric polls lpURL's /metrics for up to within until the sum of
// name's samples having every label pair in pairs (`key="value"`) is want.
func awaitMetric(ctx context.Context, t *testing.T, lpURL string, within time.Duration, want float64, name string, pairs ...string) {
	t.Helper()
	var got float64
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		got = framework.Scrape(t, nil, lpURL+"/metrics").Sum(name, pairs...)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("%s%v = %v, want %v: %v", name, pairs, got, want, err)
	}
}

// testLoadSlowReader: a client opens a full LIST and never reads it. While
// it is stuck, other LISTs are answered and writes reach new snapshots;
// after --list-write-timeout its connection is closed and its slot freed.
func testLoadSlowReader(ctx context.Context, t *testing.T, cp *framework.ControlPlane, lp *framework.Listproxy, n int) {
	const writeTimeout = loadWriteTimeout
	lpc := newRawClient(t, lp.Config())
	const path = "/api/v1/pods"
	full := url.Values{"resourceVersion": {"0"}}
	m := framework.Scrape(t, nil, lp.URL+"/metrics")
	// Socket buffers on both sides hold a few MiB (the server's send buffer
	// grows to net.ipv4.tcp_wmem's maximum, 4 MiB by default).
	if b := m.Sum("listproxy_snapshot_bytes", `resource="pods"`, `format="json"`); b < 16<<20 {
		t.Skipf("a full list is %d MiB; a stuck reader needs one larger than socket buffers (raise LISTPROXY_LOAD_PODS)", int(b)>>20)
	}
	// Responses cut short before (the gzip warm-up may have been).
	timeoutsBefore := m.Sum("listproxy_lists_write_timeouts_total")

	// A receive buffer of a few KB (fixed, so not auto-tuned): the
	// response, tens of MB at the default pod count, cannot fit into the
	// socket buffers on either side.
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	addr := strings.TrimPrefix(lp.URL, "http://")
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stuckAt := time.Now()
	if _, err := fmt.Fprintf(conn, "GET %s?%s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n\r\n", path, full.Encode(), addr); err != nil {
		t.Fatal(err)
	}
	awaitMetric(ctx, t, lp.URL, 30*time.Second, 1, "listproxy_lists_inflight")
	admittedAfter := time.Since(stuckAt)

	// Other LISTs are answered meanwhile: a full one...
	plain := newRawClient(t, &rest.Config{Host: lp.URL, DisableCompression: true})
	code, hdr, body, err := plain.get(ctx, path, full, acceptJSON)
	fullListAfter := time.Since(stuckAt)
	if err != nil || code != http.StatusOK || hdr.Get("X-Listproxy-Served-From") != "snapshot" || bytes.Count(body, []byte(loadItemMarker)) != n {
		t.Fatalf("full LIST while a reader is stuck: HTTP %d from %q with %d of %d pods, %v", code, hdr.Get("X-Listproxy-Served-From"), bytes.Count(body, []byte(loadItemMarker)), n, err)
	}
	listBytes := len(body)
	// ...and a write is applied to the snapshots: a NotOlderThan read at
	// its resourceVersion is answered from a snapshot that has it.
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(loadPodJSON("extra-1", 1)), &pod); err != nil {
		t.Fatal(err)
	}
	created, err := cp.Clientset(framework.UserAdmin).CoreV1().Pods(loadNamespace).Create(ctx, &pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := getListAnswer(ctx, lpc, "/api/v1/namespaces/"+loadNamespace+"/pods", url.Values{
		"resourceVersion": {created.ResourceVersion}, "resourceVersionMatch": {"NotOlderThan"}, "fieldSelector": {"metadata.name=extra-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.code != http.StatusOK || a.servedFrom != "snapshot" || len(a.items) != 1 || parseRV(t, a.meta.ResourceVersion) < parseRV(t, created.ResourceVersion) {
		t.Fatalf("NotOlderThan LIST at the new pod's RV %s while a reader is stuck: HTTP %d from %q, %d items at RV %s; want the pod, from a snapshot",
			created.ResourceVersion, a.code, a.servedFrom, len(a.items), a.meta.ResourceVersion)
	}
	m = framework.Scrape(t, nil, lp.URL+"/metrics")
	if inflight, timeouts := m.Sum("listproxy_lists_inflight"), m.Sum("listproxy_lists_write_timeouts_total"); inflight != 1 || timeouts != timeoutsBefore {
		t.Fatalf("after the other requests: %v responses in flight, %v write timeouts; want the stuck one still writing (is the response, %d bytes, larger than the socket buffers?)", inflight, timeouts, listBytes)
	}
	t.Logf("while one reader was stuck for %v (writing after %v): a full list (%d MiB, done after %v) and a NotOlderThan list at a new write were answered from snapshots",
		time.Since(stuckAt).Round(time.Millisecond), admittedAfter.Round(time.Millisecond), listBytes>>20, fullListAfter.Round(time.Millisecond))

	// Meanwhile: the full list, decoded, is every seeded pod once (the
	// storm checked its lists by counting items as they streamed).
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("full LIST is not JSON: %v", err)
	}
	names := map[string]bool{}
	for _, p := range list.Items {
		names[p.Metadata.Name] = true
	}
	if list.Kind != "PodList" || len(list.Items) != n || len(names) != n {
		t.Errorf("full LIST: kind %q with %d items, %d distinct names; want a PodList of the %d seeded pods", list.Kind, len(list.Items), len(names), n)
	}

	// The deadline passes: the slot is freed and the connection closed.
	awaitMetric(ctx, t, lp.URL, 30*time.Second, timeoutsBefore+1, "listproxy_lists_write_timeouts_total")
	awaitMetric(ctx, t, lp.URL, 30*time.Second, 0, "listproxy_lists_inflight")
	freedAfter := time.Since(stuckAt)
	if freedAfter < writeTimeout {
		t.Errorf("stuck response freed after %v, before its %v write deadline", freedAfter, writeTimeout)
	}
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	received, err := io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the stuck connection is still open after its write timeout (%d bytes read)", received)
	}
	if received >= int64(listBytes) {
		t.Errorf("the stuck client received %d bytes, want fewer than the %d-byte list: it was cut short", received, listBytes)
	}
	t.Logf("stuck response freed %v after the request (write timeout %v); the client got %d KiB before the connection closed (%v)",
		freedAfter.Round(time.Millisecond), writeTimeout, received>>10, err)
}
