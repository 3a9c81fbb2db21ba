package report

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// WriteJSON writes v, indented, to path, creating its directory: the form
// of every report file of the storm.
func WriteJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
