package httpapi

import (
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// HeaderPeerList marks a list request that another listproxy replica sends
// for a store's first list (warm start from a peer). Such a request is
// answered only from a snapshot held synced; anything listproxy would
// otherwise start a store for, wait for a store's sync for, or pass through
// to the apiserver is declined with DeclinePeerList, so that the asking
// replica lists from the apiserver itself.
const HeaderPeerList = "X-Listproxy-Peer-List"

// IsPeerList reports whether r is a peer's list (HeaderPeerList).
func IsPeerList(r *http.Request) bool { return r.Header.Get(HeaderPeerList) != "" }

// PeerDeclinedMessage is the message of the 503 that declines a peer's list.
const PeerDeclinedMessage = "listproxy holds no synced snapshot for this list; list from the apiserver"

// DeclinePeerList answers a peer's list that is not served from a snapshot:
// 503 ServiceUnavailable, from listproxy.
func DeclinePeerList(w http.ResponseWriter) {
	w.Header().Set(HeaderServedFrom, SourceListproxy)
	WriteStatus(w, apierrors.NewServiceUnavailable(PeerDeclinedMessage))
}
