package lists

import (
	"net/url"
	"strconv"
)

// listQuery is the parsed query of a cacheable LIST.
type listQuery struct {
	resourceVersion      string
	resourceVersionMatch string
	limit                int64
	continueToken        string
	labelSelector        string
	fieldSelector        string
	shardSelector        string
}

// parseListQuery accepts only the query parameters listproxy fully
// understands, each at most once. Anything else — an unknown parameter,
// watch=true, a malformed limit — is the apiserver's to answer, and ok is
// false. includeObject is accepted for a Table (collection.Parse reads
// it).
func parseListQuery(rawQuery string, isTable bool) (q listQuery, ok bool) {
	values, err := url.ParseQuery(rawQuery)
	if err != nil {
		return listQuery{}, false
	}
	for name, vs := range values {
		if len(vs) != 1 {
			return listQuery{}, false
		}
		v := vs[0]
		switch name {
		case "resourceVersion":
			q.resourceVersion = v
		case "resourceVersionMatch":
			q.resourceVersionMatch = v
		case "limit":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return listQuery{}, false
			}
			q.limit = n
		case "continue":
			q.continueToken = v
		case "labelSelector":
			q.labelSelector = v
		case "fieldSelector":
			q.fieldSelector = v
		case "shardSelector":
			q.shardSelector = v
		case "timeoutSeconds":
			// Bounds the apiserver's work; listproxy answers well within it.
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
				return listQuery{}, false
			}
		case "includeObject":
			if !isTable {
				return listQuery{}, false
			}
		case "watch":
			// Only an explicit "not a watch" is a list.
			if b, err := strconv.ParseBool(v); err != nil || b {
				return listQuery{}, false
			}
		default:
			return listQuery{}, false
		}
	}
	return q, true
}
