package lists

import (
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/listproxy/listproxy/pkg/httpapi"
	"github.com/listproxy/listproxy/pkg/wire"
)

// Warm start from a peer (Config.Peer): a replica reads each store's first
// list from another replica, marking every page with headerPeerList. The
// replica asked answers it only from a store it holds synced; anything it
// would wait for, start, or pass through to the apiserver it declines at
// once, and the asking replica lists from the apiserver itself. So a peer
// list never costs the apiserver more than the replica's own list, and a
// replica that a Service routes its own peer list to (it became ready, then
// started a store) declines instead of waiting for itself.

// headerPeerList marks a list request sent by another replica for its
// store's first list.
const headerPeerList = "X-Listproxy-Peer-List"

// ReasonPeerDeclined is the reason of the answer to a peer's list that
// listproxy does not serve from a synced snapshot.
const ReasonPeerDeclined Reason = "peer_declined"

// peerDeclinedMessage is the message of the 503 that declines a peer's list.
const peerDeclinedMessage = "listproxy holds no synced snapshot for this list; list from the apiserver"

// declinePeerList answers a peer's list that is not served from a snapshot.
func declinePeerList(w http.ResponseWriter) {
	w.Header().Set(httpapi.HeaderServedFrom, httpapi.SourceListproxy)
	httpapi.WriteStatus(w, apierrors.NewServiceUnavailable(peerDeclinedMessage))
}

// existingStore returns the store of info in format if one is running and
// was built for info's current discovery, else nil; it starts none.
func (l *Lists) existingStore(info *resourceInfo, format wire.Format) *storeEntry {
	l.mu.RLock()
	e, ok := l.stores[storeKey{gvr: info.GVR, format: format}]
	l.mu.RUnlock()
	if !ok || e.info.fingerprint != info.fingerprint {
		return nil
	}
	e.lastUsed.Store(time.Now().UnixNano())
	return e
}
