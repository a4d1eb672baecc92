package collection

import (
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"

	"github.com/listproxy/listproxy/pkg/wire"
)

// Media types the apiserver offers for a resource list. listproxy negotiates
// over the same set in the same order, with the apiserver's own negotiation
// code, so that it picks what the apiserver would pick; it then serves only
// the representations it holds and passes the rest through.
var (
	mediaJSON     = runtime.SerializerInfo{MediaType: "application/json", MediaTypeType: "application", MediaTypeSubType: "json"}
	mediaYAML     = runtime.SerializerInfo{MediaType: "application/yaml", MediaTypeType: "application", MediaTypeSubType: "yaml"}
	mediaProtobuf = runtime.SerializerInfo{MediaType: "application/vnd.kubernetes.protobuf", MediaTypeType: "application", MediaTypeSubType: "vnd.kubernetes.protobuf"}

	builtinMedia = []runtime.SerializerInfo{mediaJSON, mediaYAML, mediaProtobuf}
	// Custom resources have no protobuf form of their own, but their
	// PartialObjectMetadata has.
	customMedia = []runtime.SerializerInfo{mediaJSON, mediaYAML}
)

// listRestrictions mirrors the apiserver's RequestScope.AllowsMediaTypeTransform
// for a list endpoint.
type listRestrictions struct {
	standard []runtime.SerializerInfo
}

func (r listRestrictions) AllowsMediaTypeTransform(mimeType, mimeSubType string, gvk *schema.GroupVersionKind) bool {
	if gvk == nil {
		for _, info := range r.standard {
			if info.MediaTypeType == mimeType && info.MediaTypeSubType == mimeSubType {
				return true
			}
		}
		return false
	}
	if gvk.Group != "meta.k8s.io" || (gvk.Version != "v1" && gvk.Version != "v1beta1") {
		return false
	}
	switch gvk.Kind {
	case "Table":
		return mimeType == "application" && (mimeSubType == "json" || mimeSubType == "yaml")
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return true
	}
	return false
}

func (listRestrictions) AllowsServerVersion(version string) bool { return version == "v1" }
func (listRestrictions) AllowsStreamSchema(s string) bool        { return s == "watch" }

// negotiate returns the representation the apiserver would answer r
// with, when listproxy can produce it byte-for-byte. A WATCH's metadata
// form is PartialObjectMetadata (singular), a LIST's
// PartialObjectMetadataList, and only a WATCH may ask for ";stream=watch".
func negotiate(r *http.Request, custom, watch bool) (wire.Format, bool) {
	f, _, ok := negotiateTable(r, custom, watch)
	return f, ok
}

// negotiateTable is negotiate, and for a Table (JSON only) also the
// meta.k8s.io version asked for ("v1" or "v1beta1").
func negotiateTable(r *http.Request, custom, watch bool) (wire.Format, string, bool) {
	restrictions := listRestrictions{standard: builtinMedia}
	if custom {
		restrictions.standard = customMedia
	}
	options, ok := negotiation.NegotiateMediaTypeOptions(r.Header.Get("Accept"), builtinMedia, restrictions)
	if !ok || options.UseServerVersion != "" || options.Export || options.Profile != "" {
		return 0, "", false
	}
	if options.Stream != "" && (!watch || options.Stream != "watch") {
		return 0, "", false
	}
	metaKind := "PartialObjectMetadataList"
	if watch {
		metaKind = "PartialObjectMetadata"
	}
	meta, tableVersion := false, ""
	if c := options.Convert; c != nil {
		switch {
		case *c == (schema.GroupVersionKind{Group: "meta.k8s.io", Version: "v1", Kind: metaKind}):
			meta = true
		case c.Group == "meta.k8s.io" && c.Kind == "Table" && (c.Version == "v1" || c.Version == "v1beta1"):
			tableVersion = c.Version
		default:
			return 0, "", false
		}
	}
	switch options.Accepted.MediaType {
	case mediaJSON.MediaType:
		switch {
		case options.Pretty || prettyByRequest(r):
			return 0, "", false
		case meta:
			return wire.MetaJSON, "", true
		case tableVersion != "":
			return wire.Table, tableVersion, true
		}
		return wire.JSON, "", true
	case mediaProtobuf.MediaType:
		if tableVersion != "" {
			return 0, "", false
		}
		if meta {
			return wire.MetaProtobuf, "", true
		}
		return wire.Protobuf, "", true
	}
	return 0, "", false
}

// prettyByRequest mirrors the apiserver's pretty-printing rule for JSON: a
// "pretty" query parameter, or a User-Agent of a human tool.
func prettyByRequest(r *http.Request) bool {
	if v := r.URL.Query().Get("pretty"); v != "" {
		pretty, _ := strconv.ParseBool(v)
		return pretty
	}
	ua := r.UserAgent()
	return strings.HasPrefix(ua, "curl") || strings.HasPrefix(ua, "Wget") || strings.HasPrefix(ua, "Mozilla/5.0")
}
