package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// DefaultSidecarAcceptHosts are the Host names a listener without
// authentication accepts by default, as `kubectl proxy --accept-hosts` does:
// loopback names only, so a web page that rebinds its own DNS name to
// 127.0.0.1 cannot reach it.
var DefaultSidecarAcceptHosts = []string{`^localhost$`, `^127\.0\.0\.1$`, `^\[::1\]$`}

// CompileAcceptHosts compiles Host patterns (Go regular expressions).
func CompileAcceptHosts(patterns []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, p := range patterns {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", p, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// originFilter refuses requests by their Host and browser-origin headers
// before anything else looks at them.
type originFilter struct {
	acceptHosts       []*regexp.Regexp // nil: every Host
	rejectCrossOrigin bool
}

// check returns the 403 for a request the filter refuses, or nil.
//
// The Host is matched without its port; an IPv6 literal keeps its brackets
// ("[::1]"). A cross-origin browser request is one whose Origin header (sent
// by browsers on cross-origin fetches, form posts and every WebSocket
// handshake) names another host and port than the request's Host, or whose
// Sec-Fetch-Site is cross-site. Clients other than browsers send neither.
func (f originFilter) check(r *http.Request) *apierrors.StatusError {
	if f.acceptHosts != nil {
		host := hostName(r.Host)
		accepted := false
		for _, re := range f.acceptHosts {
			if re.MatchString(host) {
				accepted = true
				break
			}
		}
		if !accepted {
			return forbiddenError(fmt.Sprintf("listproxy does not accept requests for host %q (--accept-hosts); use a loopback name such as 127.0.0.1 or localhost", host))
		}
	}
	if !f.rejectCrossOrigin {
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); strings.EqualFold(site, "cross-site") {
		return forbiddenError("listproxy refuses cross-site browser requests (Sec-Fetch-Site: cross-site): a web page must not act with listproxy's identity")
	}
	if origins, ok := r.Header["Origin"]; ok {
		for _, origin := range origins {
			if !sameOrigin(origin, r.Host) {
				return forbiddenError(fmt.Sprintf("listproxy refuses cross-origin browser requests (Origin %q for host %q): a web page must not act with listproxy's identity", origin, r.Host))
			}
		}
	}
	return nil
}

// hostName is the host of a Host header without its port, an IPv6 literal
// in brackets.
func hostName(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport // no port
	}
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// sameOrigin reports whether origin (scheme://host[:port], or "null") names
// the same host and port as the request's Host header.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(withDefaultPort(u.Host, u.Scheme), withDefaultPort(host, u.Scheme))
}

// withDefaultPort adds scheme's default port to hostport if it has none.
func withDefaultPort(hostport, scheme string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	port := "80"
	if scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), port)
}
