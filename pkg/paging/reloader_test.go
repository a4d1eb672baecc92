package paging

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// writeKeys writes a key file holding testKey(n) for each n; "bad" content
// when ns is empty.
func writeKeys(t *testing.T, path string, ns ...byte) {
	t.Helper()
	if err := writeKeysErr(path, ns...); err != nil {
		t.Fatal(err)
	}
}

func writeKeysErr(path string, ns ...byte) error {
	var b strings.Builder
	b.WriteString("# test keys\n")
	for _, n := range ns {
		b.WriteString(b64(testKey(n)) + "\n")
	}
	if len(ns) == 0 {
		b.WriteString("not a key\n")
	}
	// Write then rename, as kubelet updates Secret volumes atomically.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// sealingKey reports which of the candidate keys seals tokens of r.
func sealingKey(t *testing.T, r *Reloader, candidates ...byte) byte {
	t.Helper()
	s, err := r.Seal(sampleToken())
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	for _, n := range candidates {
		if _, err := mustKeyring(t, n).Open(s); err == nil {
			return n
		}
	}
	t.Fatalf("token sealed by none of keys %v", candidates)
	return 0
}

func TestNewReloaderErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	writeKeys(t, bad)
	tests := []struct {
		name    string
		cfg     ReloaderConfig
		wantErr string
	}{
		{name: "no_path", cfg: ReloaderConfig{}, wantErr: "path is required"},
		{name: "missing_file", cfg: ReloaderConfig{Path: filepath.Join(dir, "absent")}, wantErr: "no such file"},
		{name: "bad_file", cfg: ReloaderConfig{Path: bad}, wantErr: "line 2: decode base64"},
		{name: "negative_interval", cfg: ReloaderConfig{Path: bad, Interval: -time.Second}, wantErr: "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReloader(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewReloader() = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestReloaderRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, path, 1)
	fc := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	r, err := NewReloader(ReloaderConfig{Path: path, Interval: 5 * time.Second, Clock: fc})
	if err != nil {
		t.Fatalf("NewReloader: %v", err)
	}
	polled := make(chan struct{})
	r.afterPoll = func() { polled <- struct{}{} }

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	<-polled // the initial poll; the ticker exists now
	oldTok := mustSeal(t, mustKeyring(t, 1), sampleToken())

	steps := []struct {
		name        string
		write       []byte // keys to write; nil: leave the file alone
		writeBad    bool
		wantSealer  byte
		wantOpenOld bool
		wantSame    bool // keyring pointer unchanged
	}{
		{name: "unchanged_file_keeps_keyring", wantSealer: 1, wantOpenOld: true, wantSame: true},
		{name: "rotation_new_key_first", write: []byte{2, 1}, wantSealer: 2, wantOpenOld: true},
		{name: "bad_file_keeps_keys", writeBad: true, wantSealer: 2, wantOpenOld: true, wantSame: true},
		{name: "bad_file_again_unchanged", wantSealer: 2, wantOpenOld: true, wantSame: true},
		{name: "old_key_retired", write: []byte{3, 2}, wantSealer: 3, wantOpenOld: false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := r.Keyring()
			switch {
			case st.writeBad:
				writeKeys(t, path)
			case st.write != nil:
				writeKeys(t, path, st.write...)
			}
			fc.Step(5 * time.Second)
			<-polled

			if got := sealingKey(t, r, 1, 2, 3); got != st.wantSealer {
				t.Errorf("sealing key = %d, want %d", got, st.wantSealer)
			}
			_, err := r.Open(oldTok)
			if gotOpen := err == nil; gotOpen != st.wantOpenOld {
				t.Errorf("Open(token of key 1) = %v, want success %v", err, st.wantOpenOld)
			}
			if same := r.Keyring() == before; same != st.wantSame {
				t.Errorf("keyring unchanged = %v, want %v", same, st.wantSame)
			}
		})
	}

	cancel()
	<-done
}

func TestReloaderReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, path, 1)
	r, err := NewReloader(ReloaderConfig{Path: path, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatalf("NewReloader: %v", err)
	}
	tests := []struct {
		name       string
		write      []byte
		remove     bool
		wantErr    bool
		wantSealer byte
	}{
		{name: "good_file", write: []byte{2, 1}, wantSealer: 2},
		{name: "bad_file_keeps_keys", wantErr: true, wantSealer: 2},
		{name: "missing_file_keeps_keys", remove: true, wantErr: true, wantSealer: 2},
		{name: "recovered", write: []byte{1}, wantSealer: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.remove:
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			default:
				writeKeys(t, path, tc.write...)
			}
			err := r.Reload()
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("Reload() = %v, want error %v", err, tc.wantErr)
			}
			if tc.remove && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Reload() = %v, want %v", err, os.ErrNotExist)
			}
			if got := sealingKey(t, r, 1, 2); got != tc.wantSealer {
				t.Errorf("sealing key = %d, want %d", got, tc.wantSealer)
			}
		})
	}
}

// TestReloaderConcurrent exercises Seal/Open against reloads under -race.
func TestReloaderConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, path, 1, 2)
	r, err := NewReloader(ReloaderConfig{Path: path})
	if err != nil {
		t.Fatalf("NewReloader: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			keys := []byte{1, 2}
			if i%2 == 0 {
				keys = []byte{2, 1}
			}
			if err := writeKeysErr(path, keys...); err != nil {
				t.Error(err)
				return
			}
			if err := r.Reload(); err != nil {
				t.Errorf("Reload: %v", err)
			}
		}
	}()
	for range 200 {
		s, err := r.Seal(sampleToken())
		if err != nil {
			t.Fatalf("Seal: %v", err)
		}
		if _, err := r.Open(s); err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	<-done
}
