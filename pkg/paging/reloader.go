package paging

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultReloadInterval is how often a Reloader polls its key file when
// ReloaderConfig.Interval is zero. Kubelet propagates Secret updates within
// about a minute, so a few seconds adds little. Not measured.
const DefaultReloadInterval = 10 * time.Second

// ReloaderConfig configures a Reloader.
type ReloaderConfig struct {
	// Path is the key file, in LoadKeyringFile's format. Required.
	Path string
	// Interval between polls of Path. Zero means DefaultReloadInterval.
	Interval time.Duration
	// Clock drives polling. Nil means the real clock.
	Clock clock.WithTicker
}

// Reloader holds the keyring loaded from a key file and swaps it atomically
// when the file changes, so keys rotate without a restart. A file that fails
// to load keeps the previous keys and is logged once per change. Seal and
// Open are safe for concurrent use with reloads.
type Reloader struct {
	path     string
	interval time.Duration
	clock    clock.WithTicker

	keyring atomic.Pointer[Keyring]

	// mu serializes reloads and guards seen.
	mu sync.Mutex
	// seen fingerprints the file content last loaded or attempted, so an
	// unchanged (or unchanged bad) file is not parsed and logged again.
	seen fileFingerprint

	// afterPoll, if set (tests only), is called after every poll by Run.
	afterPoll func()
}

// fileFingerprint identifies a key file's state. Content is hashed on every
// poll: key rotation keeps the size and may keep a coarse mtime.
type fileFingerprint struct {
	modTime time.Time
	sum     [32]byte
}

// NewReloader loads cfg.Path and returns a Reloader serving its keys. It
// fails if the initial load fails. Call Run to start polling.
func NewReloader(cfg ReloaderConfig) (*Reloader, error) {
	if cfg.Path == "" {
		return nil, errors.New("key file path is required")
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("reload interval must not be negative, got %v", cfg.Interval)
	}
	r := &Reloader{path: cfg.Path, interval: cfg.Interval, clock: cfg.Clock}
	if r.interval == 0 {
		r.interval = DefaultReloadInterval
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if _, err := r.reload(true); err != nil {
		return nil, err
	}
	return r, nil
}

// Keyring returns the current keyring.
func (r *Reloader) Keyring() *Keyring { return r.keyring.Load() }

// Seal seals t with the current keyring; see Keyring.Seal.
func (r *Reloader) Seal(t Token) (string, error) { return r.Keyring().Seal(t) }

// Open opens s with the current keyring; see Keyring.Open.
func (r *Reloader) Open(s string) (Token, error) { return r.Keyring().Open(s) }

// Reload re-reads the key file now, whether or not it changed. On error the
// previous keys stay in use; the error is returned and logged.
func (r *Reloader) Reload() error {
	_, err := r.reload(true)
	return err
}

// Run polls the key file every interval until ctx is done, reloading when
// its modification time or content changes.
func (r *Reloader) Run(ctx context.Context) {
	t := r.clock.NewTicker(r.interval)
	defer t.Stop()
	for {
		_, _ = r.reload(false)
		if r.afterPoll != nil {
			r.afterPoll()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// reload loads the key file if force is set or its fingerprint changed, and
// reports whether a new keyring was installed.
func (r *Reloader) reload(force bool) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadLocked(force)
}

func (r *Reloader) reloadLocked(force bool) (bool, error) {
	fp, data, err := readFingerprinted(r.path)
	if err == nil && !force && fp == r.seen {
		return false, nil
	}
	var k *Keyring
	if err == nil {
		r.seen = fp
		k, err = parseKeyring(data)
		if err != nil {
			err = fmt.Errorf("key file %s: %w", r.path, err)
		}
	}
	if err != nil {
		if r.keyring.Load() != nil {
			klog.ErrorS(err, "Failed to reload continue-token keys; keeping previous keys", "path", r.path)
		}
		return false, err
	}
	r.keyring.Store(k)
	klog.InfoS("Loaded continue-token keys", "path", r.path, "keys", len(k.byID), "sealingKeyID", k.primaryID())
	return true, nil
}

func readFingerprinted(path string) (fileFingerprint, []byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileFingerprint{}, nil, fmt.Errorf("stat key file: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fileFingerprint{}, nil, fmt.Errorf("read key file: %w", err)
	}
	return fileFingerprint{modTime: fi.ModTime(), sum: sha256.Sum256(data)}, data, nil
}
