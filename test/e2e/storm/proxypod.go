//go:build unix

package storm

// podProgram returns the program a pod of v runs.
func (h *Harness) podProgram(v Variant) string {
	if v.Sidecar {
		return h.proxyPod
	}
	return h.gateway
}
