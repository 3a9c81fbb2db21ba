package gate

// Phantoms exposes the number of undone fast-path admissions to tests.
func (g *Gate) Phantoms() uint64 { return g.phantoms.Load() }

// QueuedBit reports whether the admission word sends releases to the slow
// path (waiters, or loans that may move).
func (g *Gate) QueuedBit() bool { return g.load()&queuedBit != 0 }
