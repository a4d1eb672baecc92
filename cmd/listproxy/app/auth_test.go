package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestValidateAuth(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func(o *Options)
		wantErrs []string // substrings; nil: valid
	}{
		{name: "none_loopback", mutate: func(o *Options) {}},
		{name: "none_all_interfaces", mutate: func(o *Options) { o.ListenAddress = "0.0.0.0:8001" }, wantErrs: []string{"--listen-address", "not a loopback", "--allow-unauthenticated-non-loopback"}},
		{name: "none_allowed_non_loopback", mutate: func(o *Options) {
			o.ListenAddress = "0.0.0.0:8001"
			o.Auth.AllowUnauthenticatedNonLoopback = true
		}},
		{name: "none_with_tls_flags", mutate: func(o *Options) { o.Auth.TLSCertFile, o.Auth.ClientCAFile = "c", "ca" },
			wantErrs: []string{"--tls-cert-file: only with --authentication=delegated", "--client-ca-file: only with --authentication=delegated"}},
		{name: "delegated_all_interfaces", mutate: func(o *Options) {
			o.Auth.Mode = AuthenticationDelegated
			o.ListenAddress = "0.0.0.0:8443"
		}},
		{name: "delegated_bad_port", mutate: func(o *Options) {
			o.Auth.Mode = AuthenticationDelegated
			o.ListenAddress = "0.0.0.0:0"
		}, wantErrs: []string{"--listen-address", "port must not be 0"}},
		{name: "delegated_cert_without_key", mutate: func(o *Options) {
			o.Auth.Mode = AuthenticationDelegated
			o.Auth.TLSCertFile = "tls.crt"
		}, wantErrs: []string{"--tls-cert-file and --tls-private-key-file"}},
		{name: "delegated_with_allow_flag", mutate: func(o *Options) {
			o.Auth.Mode = AuthenticationDelegated
			o.Auth.AllowUnauthenticatedNonLoopback = true
		}, wantErrs: []string{"--allow-unauthenticated-non-loopback: only with --authentication=none"}},
		{name: "unknown_mode", mutate: func(o *Options) { o.Auth.Mode = "webhook" }, wantErrs: []string{"--authentication: must be none or delegated"}},
		{name: "zero_ttls", mutate: func(o *Options) { o.Auth.AllowTTL, o.Auth.DenyTTL = 0, -time.Second },
			wantErrs: []string{"--authorization-allow-ttl: must be positive", "--authorization-deny-ttl: must be positive"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			err := o.Validate()
			if tc.wantErrs == nil {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors mentioning %q", tc.wantErrs)
			}
			for _, s := range tc.wantErrs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Validate() = %q, want it to mention %q", err, s)
				}
			}
		})
	}
}

// TestSelfSignedCertificate: without --tls-cert-file a certificate for the
// loopback addresses is generated in --cert-dir, verifiable with the CA file
// next to it, and reused on restart.
func TestSelfSignedCertificate(t *testing.T) {
	o := newAuthOptions()
	o.Mode = AuthenticationDelegated
	o.CertDir = filepath.Join(t.TempDir(), "certs")
	serving, authCfg, err := o.complete("0.0.0.0:8443")
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	if authCfg == nil || authCfg.AllowTTL != o.AllowTTL || authCfg.DenyTTL != o.DenyTTL || authCfg.ClientCA != nil {
		t.Errorf("auth config = %+v, want the TTLs and no client CA", authCfg)
	}
	want := &ServingConfig{
		CertFile: filepath.Join(o.CertDir, SelfSignedCertFile),
		KeyFile:  filepath.Join(o.CertDir, SelfSignedKeyFile),
		CAFile:   filepath.Join(o.CertDir, SelfSignedCAFile),
	}
	if diff := cmp.Diff(want, serving); diff != "" {
		t.Fatalf("serving config (-want +got):\n%s", diff)
	}
	caPEM, err := os.ReadFile(serving.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no certificate", serving.CAFile)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tlsConfig, err := serving.tlsConfig(ctx)
	if err != nil {
		t.Fatalf("tlsConfig: %v", err)
	}
	cert, err := tlsConfig.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "localhost", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("serving certificate does not verify for %s: %v", name, err)
		}
	}
	if tlsConfig.ClientAuth != tls.RequestClientCert {
		t.Errorf("ClientAuth = %v, want RequestClientCert (the authenticator verifies)", tlsConfig.ClientAuth)
	}

	before, err := os.ReadFile(serving.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := o.complete("0.0.0.0:8443"); err != nil {
		t.Fatalf("second complete: %v", err)
	}
	if after, _ := os.ReadFile(serving.CertFile); string(after) != string(before) {
		t.Error("second complete regenerated the certificate, want it reused")
	}
}
