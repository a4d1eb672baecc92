package lists

import (
	"net/url"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	shardparser "k8s.io/apiserver/pkg/sharding"
)

// Fuzz targets for the request parsers of the HTTP edge.
// Seeds live in testdata/fuzz/<Target>; `go test` runs them as ordinary
// tests, `make fuzz` fuzzes each target for $(FUZZTIME).

// encodeListQuery is the query string of q, for the round trip: limit 0 is
// the same as no limit.
func encodeListQuery(q listQuery) string {
	v := url.Values{}
	for name, s := range map[string]string{
		"resourceVersion":      q.resourceVersion,
		"resourceVersionMatch": q.resourceVersionMatch,
		"continue":             q.continueToken,
		"labelSelector":        q.labelSelector,
		"fieldSelector":        q.fieldSelector,
		"shardSelector":        q.shardSelector,
	} {
		if s != "" {
			v.Set(name, s)
		}
	}
	if q.limit != 0 {
		v.Set("limit", strconv.FormatInt(q.limit, 10))
	}
	return v.Encode()
}

// FuzzParseListQuery checks that parseListQuery never panics, that what it
// accepts carries exactly the values the query spelled, and that an accepted
// query re-encodes to one that parses to the same listQuery.
func FuzzParseListQuery(f *testing.F) {
	for _, s := range []string{
		"",
		"limit=500&resourceVersion=0",
		"resourceVersion=123&resourceVersionMatch=Exact&limit=1",
		"labelSelector=app+in+%28a%2Cb%29&fieldSelector=spec.nodeName%3Dn1&continue=lp1.AAAA",
		"watch=false&timeoutSeconds=30",
		"limit=-1",
		"limit=99999999999999999999",
		"limit=1&limit=2",
		"%zz",
		"continue=a;b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, ok := parseListQuery(raw, false)
		if !ok {
			if q != (listQuery{}) {
				t.Fatalf("parseListQuery(%q) refused but returned %+v", raw, q)
			}
			return
		}
		values, err := url.ParseQuery(raw)
		if err != nil {
			t.Fatalf("parseListQuery(%q) accepted a query url.ParseQuery refuses: %v", raw, err)
		}
		for name, vs := range values {
			if len(vs) != 1 {
				t.Fatalf("parseListQuery(%q) accepted %d values of %q", raw, len(vs), name)
			}
		}
		want := listQuery{
			resourceVersion:      values.Get("resourceVersion"),
			resourceVersionMatch: values.Get("resourceVersionMatch"),
			continueToken:        values.Get("continue"),
			labelSelector:        values.Get("labelSelector"),
			fieldSelector:        values.Get("fieldSelector"),
			shardSelector:        values.Get("shardSelector"),
		}
		if s := values.Get("limit"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				t.Fatalf("parseListQuery(%q) accepted limit %q", raw, s)
			}
			want.limit = n
		}
		if diff := cmp.Diff(want, q, cmp.AllowUnexported(listQuery{})); diff != "" {
			t.Fatalf("parseListQuery(%q) (-want +got):\n%s", raw, diff)
		}
		again, ok := parseListQuery(encodeListQuery(q), false)
		if !ok {
			t.Fatalf("parseListQuery(%q) = %+v, whose encoding %q is refused", raw, q, encodeListQuery(q))
		}
		if diff := cmp.Diff(q, again, cmp.AllowUnexported(listQuery{})); diff != "" {
			t.Fatalf("round trip of %q (-want +got):\n%s", raw, diff)
		}
	})
}

// FuzzSelectorDigest checks that selectorDigest never panics and binds a
// token to a selector's canonical form: a parsed selector's String() has
// the digest of the selector as written.
func FuzzSelectorDigest(f *testing.F) {
	for _, s := range [][3]string{
		{"", "", ""},
		{"app=a,tier=x", "spec.nodeName=n1", ""},
		{"tier=x, app = a", "metadata.namespace=ns,spec.nodeName!=n2", ""},
		{"app in (b,a),!gone,env notin (prod)", "", ""},
		{"a==b", "spec.nodeName==x", ""},
		{"app in (", "spec.nodeName==x==y", ""},
		{"a==b==c", `metadata.name=a\,b`, ""},
		{"x>1,y<2", "spec.foo=1", ""},
		{"", "", "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')"},
		{"app=a", "", "(shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000'))"},
		{"", "", "shardRange(object.metadata.uid, '0x0', '0x8')"},
		{"", "", "  "},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, label, field, shard string) {
		got := selectorDigest(label, field, shard)
		if got != selectorDigest(label, field, shard) {
			t.Fatalf("selectorDigest(%q, %q, %q) is not deterministic", label, field, shard)
		}
		canonLabel, canonField, canonShard := label, field, shard
		if s, err := labels.Parse(label); err == nil {
			canonLabel = s.String()
			if a, b := selectorDigest(canonLabel, "", ""), selectorDigest(label, "", ""); a != b {
				t.Errorf("label selector %q: digest of its canonical form %q differs", label, canonLabel)
			}
		}
		if s, err := fields.ParseSelector(field); err == nil {
			canonField = s.String()
			if a, b := selectorDigest("", canonField, ""), selectorDigest("", field, ""); a != b {
				t.Errorf("field selector %q: digest of its canonical form %q differs", field, canonField)
			}
		}
		if shard != "" {
			if s, err := shardparser.Parse(shard); err == nil {
				canonShard = s.String()
				if a, b := selectorDigest("", "", canonShard), selectorDigest("", "", shard); a != b {
					t.Errorf("shard selector %q: digest of its canonical form %q differs", shard, canonShard)
				}
			}
		}
		if selectorDigest(canonLabel, canonField, canonShard) != got {
			t.Errorf("selectors %q, %q, %q: digest of canonical forms %q, %q, %q differs", label, field, shard, canonLabel, canonField, canonShard)
		}
	})
}
