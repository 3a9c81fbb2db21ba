package report

import "time"

// story is the downstream of the project's story: a contract of 50 calls in
// flight, 80 % handed out, 220 ms as a rule.
var story = Downstream{Contract: 50, SafetyPercent: 80, TypicalLatency: 220 * time.Millisecond}
