package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/listproxy/listproxy/pkg/httpapi"
)

// testTimeout bounds waits that succeed at once unless the code under test is
// broken; it is not used to order events.
const testTimeout = 10 * time.Second

// upstreamToken is listproxy's own credential in these tests.
const upstreamToken = "listproxy-token"

// seenRequest is what an upstream observed of a request.
type seenRequest struct {
	Method, RequestURI, Proto string
	Header                    http.Header
	Body                      string
}

func record(r *http.Request) seenRequest {
	body, _ := io.ReadAll(r.Body)
	return seenRequest{Method: r.Method, RequestURI: r.RequestURI, Proto: r.Proto, Header: r.Header.Clone(), Body: string(body)}
}

// recv returns the next request an upstream saw.
func recv(t *testing.T, seen <-chan seenRequest) seenRequest {
	t.Helper()
	select {
	case r := <-seen:
		return r
	case <-time.After(testTimeout):
		t.Fatal("upstream saw no request")
		return seenRequest{}
	}
}

func TestPassthroughHeaders(t *testing.T) {
	seen := make(chan seenRequest, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- record(r)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Audit-Id", "a1")
		h["Warning"] = []string{`299 - "first"`, `299 - "second"`}
		h.Set("Connection", "X-Hop") // makes X-Hop hop-by-hop
		h.Set("X-Hop", "dropped")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"ConfigMap"}`)
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL, BearerToken: upstreamToken}, Config{})

	const path = "/api/v1/namespaces/default/configmaps?dryRun=All&fieldManager=a%2Fb"
	req, err := http.NewRequest(http.MethodPost, p.url+path, strings.NewReader(`{"data":{"k":"v"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = http.Header{
		"Authorization":         {"Bearer caller-token"},
		"X-Remote-User":         {"admin"},
		"X-Remote-Extra-Scopes": {"all"},
		"Accept":                {"application/json;as=Table;v=v1;g=meta.k8s.io, application/json"},
		"Content-Type":          {"application/json"},
		"User-Agent":            {"kubectl/v1.36.3"},
		"X-Custom":              {"one", "two"},
		"X-Forwarded-For":       {"10.0.0.1"},
		"X-Forwarded-Host":      {"spoofed.example"},
		"X-Forwarded-Proto":     {"https"},
		"X-Real-Ip":             {"10.0.0.2"},
		"Keep-Alive":            {"timeout=5"},
	}
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)

	got := recv(t, seen)
	want := seenRequest{
		Method:     http.MethodPost,
		RequestURI: path,
		Proto:      "HTTP/1.1",
		Header: http.Header{
			"Authorization":  {"Bearer " + upstreamToken},
			"Accept":         {"application/json;as=Table;v=v1;g=meta.k8s.io, application/json"},
			"Content-Type":   {"application/json"},
			"Content-Length": {"18"},
			"User-Agent":     {"kubectl/v1.36.3"},
			"X-Custom":       {"one", "two"},
			// The caller's own claim is kept, its real address (the
			// test client's, loopback) appended: the apiserver audits
			// both. X-Real-Ip, which nobody vouches for, is dropped.
			"X-Forwarded-For":   {"10.0.0.1, 127.0.0.1"},
			"X-Forwarded-Host":  {strings.TrimPrefix(p.url, "http://")},
			"X-Forwarded-Proto": {"http"},
		},
		Body: `{"data":{"k":"v"}}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upstream saw (-want +got):\n%s", diff)
	}

	if resp.StatusCode != http.StatusCreated || string(body) != `{"kind":"ConfigMap"}` {
		t.Errorf("response = %d %q, want 201 and the upstream body", resp.StatusCode, body)
	}
	gotHeader := resp.Header.Clone()
	gotHeader.Del("Date")
	wantHeader := http.Header{
		"Content-Type":           {"application/json"},
		"Content-Length":         {"20"},
		"Audit-Id":               {"a1"},
		"Warning":                {`299 - "first"`, `299 - "second"`},
		httpapi.HeaderServedFrom: {httpapi.SourceAPIServer},
	}
	if diff := cmp.Diff(wantHeader, gotHeader); diff != "" {
		t.Errorf("response headers (-want +got):\n%s", diff)
	}
}

func TestPassthroughStreams(t *testing.T) {
	tests := []struct {
		name, path string
	}{
		{name: "watch", path: "/api/v1/namespaces/default/pods?watch=true&resourceVersion=1"},
		{name: "chunked_list", path: "/api/v1/pods"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const first, second = `{"type":"ADDED","object":{}}` + "\n", `{"type":"DELETED","object":{}}` + "\n"
			proceed := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, first)
				_ = http.NewResponseController(w).Flush()
				select {
				case <-proceed:
				case <-r.Context().Done():
					return
				}
				_, _ = io.WriteString(w, second)
			}))
			defer up.Close()
			p := startProxy(t, &rest.Config{Host: up.URL}, Config{})

			resp, err := p.client.Get(p.url + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.ContentLength != -1 {
				t.Errorf("ContentLength = %d, want -1 (streamed)", resp.ContentLength)
			}
			br := bufio.NewReader(resp.Body)
			line := make(chan string, 1)
			go func() {
				s, _ := br.ReadString('\n')
				line <- s
			}()
			// The upstream is still blocked on proceed: the first event must
			// arrive on its own.
			select {
			case got := <-line:
				if got != first {
					t.Fatalf("first read = %q, want %q", got, first)
				}
			case <-time.After(testTimeout):
				close(proceed)
				t.Fatal("first event not delivered before the upstream wrote the second")
			}
			close(proceed)
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("read rest: %v", err)
			}
			if string(rest) != second {
				t.Errorf("rest = %q, want %q", rest, second)
			}
		})
	}
}

func TestPassthroughGzip(t *testing.T) {
	// A large LIST, as the apiserver gzips responses over 128 KiB.
	var list bytes.Buffer
	list.WriteString(`{"kind":"PodList","items":[`)
	for i := range 5000 {
		if i > 0 {
			list.WriteByte(',')
		}
		fmt.Fprintf(&list, `{"metadata":{"name":"pod-%d","namespace":"default"}}`, i)
	}
	list.WriteString(`]}`)

	seenEncoding := make(chan []string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenEncoding <- r.Header.Values("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = w.Write(list.Bytes())
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Vary", "Accept-Encoding")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write(list.Bytes())
		_ = zw.Close()
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{})

	tests := []struct {
		name           string
		acceptEncoding []string
		wantEncoding   string
	}{
		{name: "client_accepts_gzip", acceptEncoding: []string{"gzip"}, wantEncoding: "gzip"},
		{name: "client_sends_no_accept_encoding", acceptEncoding: nil, wantEncoding: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			if tc.acceptEncoding != nil {
				hdr["Accept-Encoding"] = tc.acceptEncoding
			}
			resp, body := p.get(t, "/api/v1/pods", hdr)
			if got := <-seenEncoding; !cmp.Equal(got, tc.acceptEncoding) {
				t.Errorf("upstream saw Accept-Encoding %q, want %q", got, tc.acceptEncoding)
			}
			if got := resp.Header.Get("Content-Encoding"); got != tc.wantEncoding {
				t.Fatalf("Content-Encoding = %q, want %q", got, tc.wantEncoding)
			}
			if tc.wantEncoding == "gzip" {
				zr, err := gzip.NewReader(strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(zr)
				if err != nil {
					t.Fatal(err)
				}
				body = string(b)
			}
			if body != list.String() {
				t.Errorf("body differs from the upstream's (%d bytes, want %d)", len(body), list.Len())
			}
		})
	}
}

// watchEvent is the one event upgradeUpstream's watches send.
const watchEvent = `{"type":"ADDED","object":{}}` + "\n"

// upgradeUpstream is a TLS apiserver stand-in that speaks HTTP/2 when a client
// offers it and requires upstreamToken. It echoes lines on upgraded
// connections, and its watches send watchEvent and then block.
func upgradeUpstream(t *testing.T, seen chan<- seenRequest) *rest.Config {
	t.Helper()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- record(r)
		if r.Header.Get("Authorization") != "Bearer "+upstreamToken {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if r.URL.Query().Get("watch") == "true" {
			_, _ = io.WriteString(w, watchEvent)
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
			return
		}
		if !isUpgrade(r.Header) {
			_, _ = io.WriteString(w, "{}")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("upstream hijack: %v", err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n", r.Header.Get("Upgrade"))
		_ = brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil || line == "quit\n" {
				return // the deferred Close ends the upgraded stream
			}
			fmt.Fprintf(brw, "echo: %s", line)
			_ = brw.Flush()
		}
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})
	return &rest.Config{Host: up.URL, BearerToken: upstreamToken, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
}

// dialUpgrade sends an upgrade request to the proxy on a raw connection and
// returns the response and the connection.
func dialUpgrade(t *testing.T, proxyURL, method, path string, hdr http.Header) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// Bounds a broken upgrade; a working one answers at once.
	if err := conn.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, proxyURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, conn, br
}

func TestPassthroughUpgrade(t *testing.T) {
	tests := []struct {
		name, method, path string
		header             http.Header
	}{
		{
			name: "spdy_exec", method: http.MethodPost, path: "/api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true",
			header: http.Header{
				"Connection":                {"Upgrade"},
				"Upgrade":                   {"SPDY/3.1"},
				"X-Stream-Protocol-Version": {"v4.channel.k8s.io"},
				"Authorization":             {"Bearer caller-token"},
			},
		},
		{
			name: "websocket_portforward", method: http.MethodGet, path: "/api/v1/namespaces/default/pods/p/portforward?ports=80",
			header: http.Header{
				"Connection":             {"Upgrade"},
				"Upgrade":                {"websocket"},
				"Sec-Websocket-Key":      {"dGhlIHNhbXBsZSBub25jZQ=="},
				"Sec-Websocket-Version":  {"13"},
				"Sec-Websocket-Protocol": {"v5.channel.k8s.io"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan seenRequest, 2)
			upCfg := upgradeUpstream(t, seen)
			p := startProxy(t, upCfg, Config{})

			// An ordinary request uses HTTP/2 to this upstream, which is
			// what makes the upgrade case interesting.
			if resp, body := p.get(t, "/api/v1/pods", nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("plain GET = %d %q", resp.StatusCode, body)
			}
			if got := recv(t, seen); got.Proto != "HTTP/2.0" {
				t.Errorf("plain GET reached upstream over %s, want HTTP/2.0", got.Proto)
			}

			resp, conn, br := dialUpgrade(t, p.url, tc.method, tc.path, tc.header)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("upgrade answered %d %q, want 101", resp.StatusCode, body)
			}
			got := recv(t, seen)
			if got.Proto != "HTTP/1.1" {
				t.Errorf("upgrade reached upstream over %s, want HTTP/1.1", got.Proto)
			}
			if got.RequestURI != tc.path {
				t.Errorf("upstream RequestURI = %q, want %q", got.RequestURI, tc.path)
			}
			for k, v := range tc.header {
				if k == "Authorization" {
					v = []string{"Bearer " + upstreamToken}
				}
				if !cmp.Equal(got.Header.Values(k), v) {
					t.Errorf("upstream header %s = %q, want %q", k, got.Header.Values(k), v)
				}
			}
			if got, want := resp.Header.Get("Upgrade"), tc.header.Get("Upgrade"); got != want {
				t.Errorf("response Upgrade = %q, want %q", got, want)
			}
			if got := resp.Header.Get(httpapi.HeaderServedFrom); got != httpapi.SourceAPIServer {
				t.Errorf("%s = %q, want %q", httpapi.HeaderServedFrom, got, httpapi.SourceAPIServer)
			}

			for _, msg := range []string{"hello\n", "again\n"} {
				if _, err := io.WriteString(conn, msg); err != nil {
					t.Fatal(err)
				}
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if want := "echo: " + msg; line != want {
					t.Errorf("read %q, want %q", line, want)
				}
			}
		})
	}
}

func TestPassthroughUnavailable(t *testing.T) {
	// A free loopback port with nothing listening: the apiserver is down.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := startProxy(t, &rest.Config{Host: "http://" + addr}, Config{})

	resp, body := p.get(t, "/api/v1/namespaces/default/pods", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", resp.StatusCode)
	}
	wantHeader := map[string]string{
		"Content-Type":           "application/json",
		"Retry-After":            "1",
		httpapi.HeaderServedFrom: httpapi.SourceAPIServer,
	}
	for k, want := range wantHeader {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	var status metav1.Status
	if err := json.Unmarshal([]byte(body), &status); err != nil {
		t.Fatalf("body %q is not a Status: %v", body, err)
	}
	if !strings.HasPrefix(status.Message, "listproxy: the apiserver is unavailable: ") || !strings.Contains(status.Message, "connection refused") {
		t.Errorf("message = %q, want it to say the apiserver is unavailable and why", status.Message)
	}
	status.Message = ""
	want := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Reason:   metav1.StatusReasonServiceUnavailable,
		Code:     http.StatusServiceUnavailable,
		Details:  &metav1.StatusDetails{RetryAfterSeconds: 1},
	}
	if diff := cmp.Diff(want, status); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}

	// The apiserver comes back on the same address: listproxy recovers.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"PodList"}`)
	}))
	up.Listener.Close()
	up.Listener = ln
	up.Start()
	defer up.Close()
	resp, body = p.get(t, "/api/v1/namespaces/default/pods", nil)
	if resp.StatusCode != http.StatusOK || body != `{"kind":"PodList"}` {
		t.Errorf("after recovery: %d %q, want 200 and the upstream body", resp.StatusCode, body)
	}
}

func TestShutdownEndsLongRunning(t *testing.T) {
	seen := make(chan seenRequest, 4)
	upCfg := upgradeUpstream(t, seen)
	p := startProxy(t, upCfg, Config{})

	watch, err := p.client.Get(p.url + "/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	recv(t, seen)
	wbr := bufio.NewReader(watch.Body)
	if line, err := wbr.ReadString('\n'); err != nil || line != watchEvent {
		t.Fatalf("first event = %q, %v", line, err)
	}

	conn, br := attach(t, p, seen)
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("upgraded echo = %q, %v", line, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	// The watch ended cleanly: EOF, not an aborted chunked stream.
	if rest, err := io.ReadAll(wbr); err != nil || len(rest) != 0 {
		t.Errorf("watch after Shutdown: read %q, %v; want a clean end", rest, err)
	}
	// The upgraded connection is closed.
	if line, err := br.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Errorf("upgraded connection after Shutdown: read %q, %v; want EOF", line, err)
	}

	// A long-running request arriving after Shutdown is refused.
	resp, body := p.get(t, "/api/v1/pods?watch=true", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("watch after Shutdown = %d %q, want 503 shutting down", resp.StatusCode, body)
	}
}

// attach opens an upgraded attach stream through p to upgradeUpstream, which
// reports the request on seen.
func attach(t *testing.T, p *testProxy, seen <-chan seenRequest) (net.Conn, *bufio.Reader) {
	t.Helper()
	resp, conn, br := dialUpgrade(t, p.url, http.MethodPost, "/api/v1/namespaces/default/pods/p/attach",
		http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}})
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d, want 101", resp.StatusCode)
	}
	recv(t, seen)
	return conn, br
}

// An upgraded connection whose apiserver side has ended while the client
// keeps its side open is half-closed: the client has read EOF and may still
// write. Shutdown must end it too, not wait for the client.
func TestShutdownEndsHalfClosedUpgrade(t *testing.T) {
	seen := make(chan seenRequest, 4)
	p := startProxy(t, upgradeUpstream(t, seen), Config{})

	conn, br := attach(t, p, seen)
	if _, err := io.WriteString(conn, "quit\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after the apiserver ended the stream: read %q, %v; want EOF", line, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err) // it waited for the client to end its side
	}
}

// The apiserver may answer before reading a request body (a 403 from
// authorization). An HTTP/2 client whose body is not finished must still get
// the whole answer: listproxy must not wait for the rest of the body.
func TestPassthroughEarlyAnswerToUnfinishedHTTP2Body(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"kind":"Status","code":403}`)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	defer up.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw})
	h, err := NewHandler(Config{
		Upstream: &rest.Config{Host: up.URL, BearerToken: upstreamToken, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	body, bodyW := io.Pipe() // the client's body never ends
	defer bodyW.Close()
	go func() { _, _ = bodyW.Write([]byte(`{"data":`)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/v1/namespaces/b/configmaps", body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusForbidden || err != nil || string(got) != `{"kind":"Status","code":403}` {
		t.Errorf("response HTTP/%d %d %q, read error %v; want HTTP/2 403 with the apiserver's whole body", resp.ProtoMajor, resp.StatusCode, got, err)
	}
}

// TestPassthroughReusesCopyBuffers checks that a response passed through
// is copied through a lent buffer: a small GET through the proxy allocates
// less beyond the same GET sent straight to the upstream than the 32 KiB
// copy buffer httputil.ReverseProxy would otherwise make for each request.
func TestPassthroughReusesCopyBuffers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Pod"}`)
	}))
	defer up.Close()
	p := startProxy(t, &rest.Config{Host: up.URL}, Config{})
	const path = "/api/v1/namespaces/default/pods/a"
	allocated := func(url string) uint64 {
		get := func() {
			resp, err := p.client.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		for range 20 { // connections, pools and caches warmed
			get()
		}
		const n = 200
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			get()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	direct, proxied := allocated(up.URL+path), allocated(p.url+path)
	t.Logf("bytes allocated per request: %d directly, %d through the proxy", direct, proxied)
	if proxied-min(direct, proxied) >= 24<<10 {
		t.Errorf("a pass-through request allocates %d bytes more than a direct one, want < 24 KiB (the 32 KiB copy buffer lent, not made)", proxied-direct)
	}
}
