package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/listproxy/listproxy/pkg/auth"
	"github.com/listproxy/listproxy/pkg/proxy"
)

// Values of --authentication.
const (
	AuthenticationNone      = "none"
	AuthenticationDelegated = "delegated"
)

// Names of the files a generated self-signed serving certificate is kept in,
// under --cert-dir.
const (
	SelfSignedCertFile = "listproxy.crt"
	SelfSignedKeyFile  = "listproxy.key"
	SelfSignedCAFile   = "listproxy-ca.crt"
)

// AuthOptions are the flags of authentication, authorization and TLS.
type AuthOptions struct {
	// Mode is AuthenticationNone (sidecar) or AuthenticationDelegated
	// (shared service).
	Mode string
	// AllowUnauthenticatedNonLoopback lets sidecar mode listen on a
	// non-loopback address.
	AllowUnauthenticatedNonLoopback bool
	// AcceptHosts are comma-separated Host patterns; empty is the mode's
	// default (see acceptHosts).
	AcceptHosts string
	// TLSCertFile and TLSPrivateKeyFile are the serving certificate in
	// delegated mode; without them one is generated in CertDir.
	TLSCertFile       string
	TLSPrivateKeyFile string
	CertDir           string
	// ClientCAFile verifies client certificates in delegated mode.
	ClientCAFile  string
	TokenCacheTTL time.Duration
	AllowTTL      time.Duration
	DenyTTL       time.Duration
}

func newAuthOptions() AuthOptions {
	d := auth.DefaultConfig()
	return AuthOptions{
		Mode:          AuthenticationNone,
		TokenCacheTTL: d.TokenCacheTTL,
		AllowTTL:      d.AllowTTL,
		DenyTTL:       d.DenyTTL,
	}
}

func (o *AuthOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Mode, "authentication", o.Mode,
		"none: sidecar mode; plain HTTP on a loopback address, callers are trusted and every request uses listproxy's credentials. "+
			"delegated: shared-service mode; HTTPS on any address, callers are authenticated (TokenReview for bearer tokens, --client-ca-file for certificates), "+
			"LISTs served from snapshots are authorized per caller with SubjectAccessReviews, and pass-through requests carry the caller's identity.")
	fs.BoolVar(&o.AllowUnauthenticatedNonLoopback, "allow-unauthenticated-non-loopback", o.AllowUnauthenticatedNonLoopback,
		"With --authentication=none, allow a non-loopback --listen-address. Anyone who can reach it acts with listproxy's identity. Dangerous.")
	fs.StringVar(&o.AcceptHosts, "accept-hosts", o.AcceptHosts,
		"Comma-separated regular expressions of the Host names served (port removed, IPv6 in brackets); other Hosts get 403, as with 'kubectl proxy --accept-hosts'. "+
			"Default with --authentication=none: "+strings.Join(proxy.DefaultSidecarAcceptHosts, ",")+" (loopback names: a web page cannot reach listproxy by rebinding its DNS name to 127.0.0.1); "+
			"with --authentication=delegated: every Host (TLS and caller authentication already bind each request to a name and a caller).")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile,
		"With --authentication=delegated, the serving certificate (PEM, may include intermediates); re-read when it changes. Empty: a self-signed certificate is generated in --cert-dir.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile,
		"The private key of --tls-cert-file (PEM).")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir,
		"Where a generated self-signed certificate is written ("+SelfSignedCertFile+", "+SelfSignedKeyFile+", and its CA "+SelfSignedCAFile+") and reused from. Empty: a new temporary directory.")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", o.ClientCAFile,
		"With --authentication=delegated, CA bundle verifying client certificates; the common name is the user, organizations are groups. Usually the apiserver's --client-ca-file. Empty: client certificates are not accepted.")
	fs.DurationVar(&o.TokenCacheTTL, "authentication-token-cache-ttl", o.TokenCacheTTL,
		"How long TokenReview answers are cached.")
	fs.DurationVar(&o.AllowTTL, "authorization-allow-ttl", o.AllowTTL,
		"How long an allowing SubjectAccessReview answer is cached: a revoked grant may still let cached LISTs through for this long.")
	fs.DurationVar(&o.DenyTTL, "authorization-deny-ttl", o.DenyTTL,
		"How long a denying SubjectAccessReview answer is cached: a new grant may take this long to take effect for cached LISTs.")
}

// validate checks the options against the listen address.
func (o *AuthOptions) validate(listenAddress string) []error {
	var errs []error
	switch o.Mode {
	case AuthenticationNone:
		if err := validateHostPort(listenAddress); err != nil {
			errs = append(errs, fmt.Errorf("--listen-address: %w", err))
		} else if err := validateLoopback(listenAddress); err != nil && !o.AllowUnauthenticatedNonLoopback {
			errs = append(errs, fmt.Errorf("--listen-address: %w (use --authentication=delegated, or --allow-unauthenticated-non-loopback if you must)", err))
		}
		for flag, v := range map[string]string{"--tls-cert-file": o.TLSCertFile, "--tls-private-key-file": o.TLSPrivateKeyFile, "--client-ca-file": o.ClientCAFile, "--cert-dir": o.CertDir} {
			if v != "" {
				errs = append(errs, fmt.Errorf("%s: only with --authentication=%s", flag, AuthenticationDelegated))
			}
		}
	case AuthenticationDelegated:
		if err := validateHostPort(listenAddress); err != nil {
			errs = append(errs, fmt.Errorf("--listen-address: %w", err))
		}
		if o.AllowUnauthenticatedNonLoopback {
			errs = append(errs, fmt.Errorf("--allow-unauthenticated-non-loopback: only with --authentication=%s", AuthenticationNone))
		}
		if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
			errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file: set both or neither"))
		}
	default:
		errs = append(errs, fmt.Errorf("--authentication: must be %s or %s, got %q", AuthenticationNone, AuthenticationDelegated, o.Mode))
	}
	if _, err := proxy.CompileAcceptHosts(splitPatterns(o.AcceptHosts)); err != nil {
		errs = append(errs, fmt.Errorf("--accept-hosts: %w", err))
	}
	for flag, d := range map[string]time.Duration{"--authentication-token-cache-ttl": o.TokenCacheTTL, "--authorization-allow-ttl": o.AllowTTL, "--authorization-deny-ttl": o.DenyTTL} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %v", flag, d))
		}
	}
	return errs
}

// OriginPolicy is which requests listproxy refuses by their Host and browser
// origin (see proxy.Config).
type OriginPolicy struct {
	AcceptHosts       []*regexp.Regexp
	RejectCrossOrigin bool
}

// originPolicy returns the policy of the mode. Without authentication,
// anything that can reach the port acts as listproxy: only loopback Host
// names are served by default, and browser requests from another origin
// are refused whatever the Host (a page cannot be allowed to act as
// listproxy). With delegated authentication every request must carry a
// credential a browser does not attach by itself and arrives over TLS, as
// at the apiserver, which checks neither Host nor Origin: every Host is
// served unless --accept-hosts says otherwise, and origins are not checked.
func (o *AuthOptions) originPolicy() (OriginPolicy, error) {
	patterns := splitPatterns(o.AcceptHosts)
	sidecar := o.Mode != AuthenticationDelegated
	if len(patterns) == 0 && sidecar {
		patterns = proxy.DefaultSidecarAcceptHosts
	}
	hosts, err := proxy.CompileAcceptHosts(patterns)
	if err != nil {
		return OriginPolicy{}, fmt.Errorf("--accept-hosts: %w", err)
	}
	return OriginPolicy{AcceptHosts: hosts, RejectCrossOrigin: sidecar}, nil
}

// splitPatterns splits a comma-separated list, dropping empty entries.
func splitPatterns(list string) []string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// ServingConfig is how delegated mode serves HTTPS.
type ServingConfig struct {
	// CertFile and KeyFile are the serving certificate and key.
	CertFile, KeyFile string
	// CAFile is the CA of a generated self-signed certificate; empty when
	// the certificate was given.
	CAFile string
	// ClientCA verifies client certificates; nil accepts none.
	ClientCA *dynamiccertificates.DynamicFileCAContent
}

// complete returns the serving and auth configuration of delegated mode,
// generating a self-signed certificate if none was given; nil, nil in sidecar
// mode.
func (o *AuthOptions) complete(listenAddress string) (*ServingConfig, *auth.Config, error) {
	if o.Mode != AuthenticationDelegated {
		if o.AllowUnauthenticatedNonLoopback && validateLoopback(listenAddress) != nil {
			klog.InfoS("WARNING: --allow-unauthenticated-non-loopback: listproxy serves plain HTTP WITHOUT AUTHENTICATION on a non-loopback address; anyone who reaches it acts with listproxy's identity", "address", listenAddress)
			if o.AcceptHosts == "" {
				klog.InfoS("--accept-hosts is unset: only requests for loopback Host names are served; set it to the names clients use to reach this address")
			}
		}
		return nil, nil, nil
	}
	serving := &ServingConfig{CertFile: o.TLSCertFile, KeyFile: o.TLSPrivateKeyFile}
	if serving.CertFile == "" {
		if err := o.selfSigned(listenAddress, serving); err != nil {
			return nil, nil, err
		}
	}
	authCfg := &auth.Config{TokenCacheTTL: o.TokenCacheTTL, AllowTTL: o.AllowTTL, DenyTTL: o.DenyTTL}
	if o.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", o.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		serving.ClientCA = ca
		authCfg.ClientCA = ca
	}
	return serving, authCfg, nil
}

// selfSigned generates a serving certificate signed by a new CA into
// CertDir, or reuses one found there.
func (o *AuthOptions) selfSigned(listenAddress string, serving *ServingConfig) error {
	dir := o.CertDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "listproxy-serving-"); err != nil {
			return fmt.Errorf("--cert-dir: %w", err)
		}
	}
	serving.CertFile = filepath.Join(dir, SelfSignedCertFile)
	serving.KeyFile = filepath.Join(dir, SelfSignedKeyFile)
	serving.CAFile = filepath.Join(dir, SelfSignedCAFile)
	if _, err := tls.LoadX509KeyPair(serving.CertFile, serving.KeyFile); err == nil {
		klog.InfoS("Serving with the self-signed certificate found in --cert-dir", "certFile", serving.CertFile, "caFile", serving.CAFile)
		return nil
	}
	host, _, _ := net.SplitHostPort(listenAddress)
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		ips = append(ips, ip)
	}
	ips = append(ips, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	dns := []string{"localhost"}
	if name, err := os.Hostname(); err == nil && name != "" {
		dns = append(dns, name)
	}
	// The first block is the serving certificate, the second its CA.
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("listproxy", ips, dns)
	if err != nil {
		return fmt.Errorf("generate self-signed certificate: %w", err)
	}
	leaf, rest := pem.Decode(certPEM)
	if leaf == nil {
		return errors.New("generate self-signed certificate: no PEM block")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--cert-dir: %w", err)
	}
	for path, data := range map[string][]byte{serving.CertFile: certPEM, serving.KeyFile: keyPEM, serving.CAFile: bytes.TrimSpace(rest)} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("--cert-dir: %w", err)
		}
	}
	klog.InfoS("Generated a self-signed serving certificate; clients must trust its CA", "caFile", serving.CAFile, "certFile", serving.CertFile)
	return nil
}

// tlsConfig starts reloading the serving certificate and client CA under ctx
// and returns the server's TLS configuration. Client certificates are
// requested but not verified in the handshake: the authenticator verifies
// them, so a certificate from another CA is answered with a 401 like any
// other bad credential, as the apiserver does.
func (s *ServingConfig) tlsConfig(ctx context.Context) (*tls.Config, error) {
	content, err := dynamiccertificates.NewDynamicServingContentFromFiles("serving-cert", s.CertFile, s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	go content.Run(ctx, 1)
	if s.ClientCA != nil {
		go s.ClientCA.Run(ctx, 1)
	}
	cert := &servingCert{content: content}
	if _, err := cert.get(nil); err != nil {
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: cert.get,
		ClientAuth:     tls.RequestClientCert,
	}, nil
}

// servingCert hands the TLS server the current serving certificate, parsed
// once per change of the files.
type servingCert struct {
	content *dynamiccertificates.DynamicCertKeyPairContent

	mu      sync.Mutex // guards the fields below
	certPEM []byte
	keyPEM  []byte
	parsed  *tls.Certificate
}

func (s *servingCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certPEM, keyPEM := s.content.CurrentCertKeyContent()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parsed != nil && bytes.Equal(certPEM, s.certPEM) && bytes.Equal(keyPEM, s.keyPEM) {
		return s.parsed, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	s.certPEM, s.keyPEM, s.parsed = certPEM, keyPEM, &cert
	return s.parsed, nil
}
