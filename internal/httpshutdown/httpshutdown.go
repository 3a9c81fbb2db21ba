// Package httpshutdown lets an HTTP server's Shutdown wait for requests
// only.
//
// http.Server.Shutdown waits up to 5 seconds for a connection on which no
// request has arrived yet, as if one were about to come — and an HTTP client
// routinely leaves such a connection behind: it dials for a call, the call
// goes out on a connection that became idle first, and the new one is pooled
// unused. A terminating pod would then hold its share of a downstream's
// contract for 5 seconds after its last call, while the operator waits for
// the pod's release to hand that share to the others.
package httpshutdown

import (
	"net"
	"net/http"
	"sync"
)

// CloseUnused makes srv's Shutdown close the connections that have not
// carried a request, once its listeners are closed, so that it waits for
// requests in flight only. Call it before srv serves; it keeps srv's own
// ConnState hook, calling it first.
func CloseUnused(srv *http.Server) {
	u := &unusedConns{}
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		if next != nil {
			next(c, s)
		}
		u.track(c, s)
	}
	srv.RegisterOnShutdown(u.closeAll)
}

// unusedConns tracks a server's connections on which no request has
// arrived yet.
type unusedConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the server's ConnState hook.
func (u *unusedConns) track(c net.Conn, s http.ConnState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s == http.StateNew {
		if u.conns == nil {
			u.conns = map[net.Conn]struct{}{}
		}
		u.conns[c] = struct{}{}
		return
	}
	delete(u.conns, c)
}

// closeAll closes every connection that has not carried a request.
func (u *unusedConns) closeAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for c := range u.conns {
		_ = c.Close()
	}
	clear(u.conns)
}
