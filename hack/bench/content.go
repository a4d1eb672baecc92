package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// listView is what a LIST answer says, decoded from JSON or protobuf.
type listView struct {
	rv        string
	cont      string
	remaining *int64
	items     []runtime.Object
}

// decodeList decodes a list response body, gunzipping it first if needed.
func decodeList(res result) (listView, error) {
	body := res.body
	if res.gzipped {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return listView{}, fmt.Errorf("gunzip: %w", err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			return listView{}, fmt.Errorf("gunzip: %w", err)
		}
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return listView{}, fmt.Errorf("decode list: %w", err)
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return listView{}, err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return listView{}, err
	}
	return listView{rv: lm.GetResourceVersion(), cont: lm.GetContinue(), remaining: lm.GetRemainingItemCount(), items: items}, nil
}

// exactAt is path asking for resourceVersion rv exactly.
func exactAt(path, rv string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "resourceVersion=" + url.QueryEscape(rv) + "&resourceVersionMatch=Exact"
}

// compareWithAPIServer checks a listproxy answer against the apiserver's own
// answer to path, which asks for the same list at the same resourceVersion
// (see exactAt) or continues the apiserver's walk at it: the same items, the
// same remainingItemCount, and a continue token exactly when the apiserver
// gives one. It returns the apiserver's answer (whose continue token walks
// on). The apiserver is the oracle; sizes say nothing about content.
func compareWithAPIServer(ctx context.Context, api *target, path string, got listView) (listView, error) {
	res, err := api.do(ctx, request{path: path, accept: acceptJSON, keep: true})
	if err != nil {
		return listView{}, err
	}
	want, err := decodeList(res)
	if err != nil {
		return listView{}, fmt.Errorf("apiserver GET %s: %w", path, err)
	}
	switch {
	case len(want.items) != len(got.items):
		return want, fmt.Errorf("GET %s: listproxy answered %d items, the apiserver %d", path, len(got.items), len(want.items))
	case (want.cont == "") != (got.cont == ""):
		return want, fmt.Errorf("GET %s: listproxy continue %q, the apiserver %q", path, got.cont, want.cont)
	case !equalCount(want.remaining, got.remaining):
		return want, fmt.Errorf("GET %s: listproxy remainingItemCount %s, the apiserver %s", path, countText(got.remaining), countText(want.remaining))
	}
	for i := range want.items {
		if !equality.Semantic.DeepEqual(want.items[i], got.items[i]) {
			return want, fmt.Errorf("GET %s: item %d (%s) differs from the apiserver's", path, i, objectName(want.items[i]))
		}
	}
	return want, nil
}

func equalCount(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func countText(n *int64) string {
	if n == nil {
		return "unset"
	}
	return fmt.Sprint(*n)
}

func objectName(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		return "?"
	}
	return m.GetNamespace() + "/" + m.GetName()
}
