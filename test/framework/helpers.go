package framework

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"

	"golang.org/x/sync/errgroup"
)

// Parallel runs fn(ctx, i) for i in [0, n) on at most workers goroutines and
// returns the first error (or ctx's).
func Parallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// WriteContinueTokenKeyFile writes a file for --continue-token-keys-file with
// one fresh key (base64 of 32 random bytes).
func WriteContinueTokenKeyFile(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}
