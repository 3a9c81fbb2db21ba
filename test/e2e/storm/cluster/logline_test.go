package cluster

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseLogLine(t *testing.T) {
	five := 5
	ts := time.Date(2026, 5, 1, 10, 0, 0, 123456789, time.UTC)
	tests := []struct {
		line string
		want LogLine
		ok   bool
	}{
		{`{"time":"2026-05-01T10:00:00.123456789Z","level":"INFO","msg":"Serving","address":"127.0.0.1:4321"}`,
			LogLine{Time: ts, Level: "INFO", Msg: MsgServing, Address: "127.0.0.1:4321"}, true},
		{`{"time":"2026-05-01T10:00:00.123456789Z","level":"INFO","msg":"Applied plan","gate":"logistics-api","hash":"abc","permits":5,"extra":[1]}`,
			LogLine{Time: ts, Level: "INFO", Msg: MsgAppliedPlan, Gate: "logistics-api", Hash: "abc", Permits: &five}, true},
		{`plain text`, LogLine{}, false},
		{`{"level":"INFO"}`, LogLine{}, false},
		{`{"msg":`, LogLine{}, false},
		{``, LogLine{}, false},
	}
	for _, tt := range tests {
		got, ok := ParseLogLine([]byte(tt.line))
		if ok != tt.ok {
			t.Errorf("ParseLogLine(%q) ok = %v", tt.line, ok)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseLogLine(%q) (-want +got):\n%s", tt.line, diff)
		}
	}
}
