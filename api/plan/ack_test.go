package plan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAck(t *testing.T) {
	if got := AckFor(sampleDoc()); got != (Ack{Epoch: "0f1e-uid", Revision: 17}) {
		t.Errorf("AckFor(sample) = %+v", got)
	}
	for _, tt := range []struct {
		ack  Ack
		text string
	}{
		{Ack{Epoch: "0f1e-uid", Revision: 17}, "0f1e-uid/17"},
		{Ack{Epoch: "e", Revision: 1}, "e/1"},
		{Ack{Epoch: "E-9", Revision: 9223372036854775807}, "E-9/9223372036854775807"},
		{Ack{Epoch: "0f1e-uid", Released: true}, "0f1e-uid/released"},
	} {
		if got := tt.ack.String(); got != tt.text {
			t.Errorf("%+v.String() = %q, want %q", tt.ack, got, tt.text)
		}
		back, err := ParseAck(tt.text)
		if err != nil {
			t.Errorf("ParseAck(%q): %v", tt.text, err)
			continue
		}
		if diff := cmp.Diff(tt.ack, back); diff != "" {
			t.Errorf("ParseAck(%q) (-want +got):\n%s", tt.text, diff)
		}
	}
}

func TestParseAckRejects(t *testing.T) {
	for _, tt := range []struct{ in, wantIn string }{
		{"", "want <epoch>/<revision>"},
		{"abc123", "want <epoch>/<revision>"}, // a version 1 acknowledgement: the hash
		{"/17", "epoch must be 1 to 64"},
		{strings.Repeat("e", 65) + "/1", "epoch must be 1 to 64"},
		{"e.f/1", "epoch must be"},
		{"e/", "revision must be"},
		{"e/0", "revision must be"},
		{"e/-1", "revision must be"},
		{"e/+1", "revision must be"},
		{"e/017", "revision must be"},
		{"e/1.5", "revision must be"},
		{"e/9223372036854775808", "revision must be"},
		{"e/Released", "revision must be"},
		{"e/1/2", "revision must be"},
		{"e/released/", "revision must be"},
		{" e/1", "epoch must be"},
	} {
		got, err := ParseAck(tt.in)
		if err == nil {
			t.Errorf("ParseAck(%q) accepted it: %+v", tt.in, got)
			continue
		}
		if got != (Ack{}) {
			t.Errorf("ParseAck(%q) returned %+v with its error", tt.in, got)
		}
		if !strings.Contains(err.Error(), tt.wantIn) || !strings.Contains(err.Error(), "plan: acknowledgement") {
			t.Errorf("ParseAck(%q) = %v, want an error containing %q", tt.in, err, tt.wantIn)
		}
	}
}
