// Package table is listproxy's knowledge of the apiserver's Table rows
// (meta.k8s.io/v1 Table, as kubectl get asks for): which cells of which
// resource are relative to the clock on each apiserver release, how to
// find the time each one is relative to, and how to render it again for
// another instant with the apiserver's own formatter
// (k8s.io/apimachinery/pkg/util/duration.HumanDuration).
//
// A row is stored as the apiserver rendered it once per object version
// (Rules.Parse), and written per response with its clock cells rendered
// for the response's instant (Row.Append); every other byte is the
// apiserver's. Parse checks each clock cell the apiserver rendered
// against what the rule gives for the time the row was received, so that
// a rule that does not hold for a release is found at ingest, not served;
// it tolerates the apiserver's clock and listproxy's being up to
// MaxClockSkew apart, and ParseAhead tells how far ahead the apiserver's
// clock was at least.
//
// It imports nothing of listproxy's.
package table
