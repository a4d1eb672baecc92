package app

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestValidateWarmFrom(t *testing.T) {
	tests := []struct {
		name     string
		warmFrom string
		caFile   string
		wantErrs []string // substrings; nil: valid
	}{
		{name: "none"},
		{name: "https_with_ca", warmFrom: "https://listproxy.ns.svc:443", caFile: "/ca.crt"},
		{name: "https_loopback_with_ca", warmFrom: "https://127.0.0.1:8443", caFile: "/ca.crt"},
		{name: "https_without_ca", warmFrom: "https://listproxy.ns.svc:443",
			wantErrs: []string{"--warm-from-ca-file", "required"}},
		{name: "http_ipv4_loopback", warmFrom: "http://127.0.0.1:8001"},
		{name: "http_other_ipv4_loopback", warmFrom: "http://127.0.0.2:8001"},
		{name: "http_ipv6_loopback", warmFrom: "http://[::1]:8001"},
		{name: "http_service", warmFrom: "http://listproxy.ns.svc:8001", wantErrs: []string{"--warm-from", "loopback"}},
		{name: "http_pod_ip", warmFrom: "http://10.0.0.1:8001", wantErrs: []string{"--warm-from", "loopback"}},
		{name: "http_unspecified", warmFrom: "http://0.0.0.0:8001", wantErrs: []string{"--warm-from", "loopback"}},
		{name: "http_localhost_name", warmFrom: "http://localhost:8001", wantErrs: []string{"--warm-from", "loopback"}},
		{name: "http_with_ca", warmFrom: "http://127.0.0.1:8001", caFile: "/ca.crt",
			wantErrs: []string{"--warm-from-ca-file", "not https"}},
		{name: "ca_without_peer", caFile: "/ca.crt", wantErrs: []string{"--warm-from-ca-file", "without --warm-from"}},
		{name: "not_http", warmFrom: "ftp://127.0.0.1:21", wantErrs: []string{"--warm-from", "http or https"}},
		{name: "no_host", warmFrom: "https:///x", caFile: "/ca.crt", wantErrs: []string{"--warm-from", "http or https"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newCacheOptions()
			o.WarmFrom, o.WarmFromCAFile = tc.warmFrom, tc.caFile
			errs := o.validate()
			if tc.wantErrs == nil {
				if len(errs) != 0 {
					t.Errorf("validate() = %v, want none", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("validate() = none, want an error mentioning %q", tc.wantErrs)
			}
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
			}
			got := strings.Join(msgs, "; ")
			for _, s := range tc.wantErrs {
				if !strings.Contains(got, s) {
					t.Errorf("validate() = %q, want it to mention %q", got, s)
				}
			}
		})
	}
}

// peerCredentials is what a rest.Config presents to the server it reaches.
type peerCredentials struct {
	Host                                  string
	BearerToken, BearerTokenFile          string
	Username, Password                    string
	Impersonate                           rest.ImpersonationConfig
	AuthProvider, ExecProvider            bool
	CAFile, CertFile, KeyFile, ServerName string
	CAData, CertData, KeyData             string
	Insecure, HasWrapTransport, HasDialer bool
	UserAgent                             string
}

func credentialsOf(c *rest.Config) peerCredentials {
	return peerCredentials{
		Host:        c.Host,
		BearerToken: c.BearerToken, BearerTokenFile: c.BearerTokenFile,
		Username: c.Username, Password: c.Password,
		Impersonate:  c.Impersonate,
		AuthProvider: c.AuthProvider != nil, ExecProvider: c.ExecProvider != nil,
		CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName,
		CAData: string(c.CAData), CertData: string(c.CertData), KeyData: string(c.KeyData),
		Insecure: c.Insecure, HasWrapTransport: c.WrapTransport != nil, HasDialer: c.Dial != nil,
		UserAgent: c.UserAgent,
	}
}

// TestPeerConfigCredentials: a peer is sent only what its service mode
// authenticates (the bearer token and the client certificate), over https
// verified with --warm-from-ca-file alone, and nothing over http.
func TestPeerConfigCredentials(t *testing.T) {
	upstream := &rest.Config{
		Host:        "https://apiserver.example:6443",
		UserAgent:   "listproxy/test",
		BearerToken: "upstream-token", BearerTokenFile: "/var/run/token",
		Username: "admin", Password: "secret",
		Impersonate:  rest.ImpersonationConfig{UserName: "someone"},
		AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "oidc"},
		ExecProvider: &clientcmdapi.ExecConfig{Command: "cloud-token"},
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: "/apiserver-ca.crt", CAData: []byte("apiserver CA"), ServerName: "apiserver.internal",
			CertFile: "/client.crt", KeyFile: "/client.key", CertData: []byte("cert"), KeyData: []byte("key"),
		},
	}
	tests := []struct {
		name     string
		warmFrom string
		caFile   string
		want     peerCredentials
	}{
		{
			name: "https", warmFrom: "https://listproxy.ns.svc:443", caFile: "/peer-ca.crt",
			want: peerCredentials{
				Host:        "https://listproxy.ns.svc:443",
				BearerToken: "upstream-token", BearerTokenFile: "/var/run/token",
				CAFile: "/peer-ca.crt", CertFile: "/client.crt", KeyFile: "/client.key", CertData: "cert", KeyData: "key",
				UserAgent: "listproxy/test",
			},
		},
		{
			name: "http_loopback", warmFrom: "http://127.0.0.1:8001",
			want: peerCredentials{Host: "http://127.0.0.1:8001", UserAgent: "listproxy/test"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newCacheOptions()
			o.WarmFrom, o.WarmFromCAFile = tc.warmFrom, tc.caFile
			if errs := o.validate(); len(errs) != 0 {
				t.Fatalf("validate() = %v", errs)
			}
			if diff := cmp.Diff(tc.want, credentialsOf(o.peerConfig(upstream))); diff != "" {
				t.Errorf("peer credentials (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStartCacheRegistersOnce: the store registry, the LIST server and the
// watch server register their metrics side by side in one registry
// without a clash, with and without etcd, and start.
func TestStartCacheRegistersOnce(t *testing.T) {
	for _, etcd := range []bool{false, true} {
		t.Run(fmt.Sprintf("etcd=%v", etcd), func(t *testing.T) {
			o := newCacheOptions()
			if etcd {
				o.EtcdServers = []string{"http://127.0.0.1:1"}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c, err := startCache(ctx, &Config{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, Cache: &o}, prometheus.NewRegistry())
			if err != nil {
				t.Fatalf("startCache: %v", err)
			}
			if c.stores == nil || c.lists == nil || c.watches == nil {
				t.Errorf("startCache = %+v, want a registry, a LIST server and a watch server", c)
			}
		})
	}
}
