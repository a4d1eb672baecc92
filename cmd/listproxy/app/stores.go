package app

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/listproxy/listproxy/pkg/auth"
)

// addStoreFlags adds the flags of store admission (stores.Config
// AuthorizeStart and MaxStoreBytes).
func (o *CacheOptions) addStoreFlags(fs *pflag.FlagSet) {
	fs.Int64Var(&o.MaxStoreBytes, "max-store-bytes", o.MaxStoreBytes,
		"Bound on the bytes all snapshot stores hold (objects and history), per replica: a store that is not preloaded is started only while the running ones hold less (one still in its first list counting 1/16 of the bound), otherwise its requests pass through "+
			"(listproxy_stores_refused_total{reason=\"over_budget\"}); running stores are never dropped for it. Measured RSS is 1.4-1.7x these bytes, so about half the memory limit. 0 for no bound.")
}

func (o *CacheOptions) validateStores() []error {
	if o.MaxStoreBytes < 0 {
		return []error{fmt.Errorf("--max-store-bytes: must not be negative, got %d", o.MaxStoreBytes)}
	}
	return nil
}

// withSharedAuthorizer returns cfg with the delegating authorizer
// (auth.NewAuthorizer) set in a copy of its Auth, so that the edge's
// reviews and store admission's share one cache; cfg as it is in sidecar
// mode or when it has an authorizer.
func withSharedAuthorizer(cfg *Config) (*Config, error) {
	if cfg.Auth == nil || cfg.Auth.Authorizer != nil {
		return cfg, nil
	}
	authz, err := auth.NewAuthorizer(cfg.Auth, cfg.Upstream)
	if err != nil {
		return nil, err
	}
	authCfg := *cfg.Auth
	authCfg.Authorizer = authz
	out := *cfg
	out.Auth = &authCfg
	return &out, nil
}

// authorizeStart is store admission's authorization
// (stores.Config.AuthorizeStart): in service mode a request starts a store
// only for a caller who may list the resource in every namespace; in
// sidecar mode (nil) every request may.
func authorizeStart(authCfg *auth.Config) func(context.Context, schema.GroupVersionResource) bool {
	if authCfg == nil {
		return nil
	}
	authz := authCfg.Authorizer
	if authz == nil {
		// Not reachable after withSharedAuthorizer. Fail closed.
		authz = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return authorizer.DecisionNoOpinion, "", nil
		})
	}
	return func(ctx context.Context, gvr schema.GroupVersionResource) bool {
		return auth.MayListAll(ctx, authz, gvr)
	}
}
