package gate

// Phantoms exposes the number of undone fast-path admissions to tests.
func (g *Gate) Phantoms() uint64 { return g.phantoms.Load() }
