// Package plan defines the plan document that the operator publishes in a
// workload's ConfigMap and that the runtime library enforces: its Go type,
// its wire format, its validation, its content hash, and the acknowledgement
// (Ack) a pod writes back once it enforces a document.
//
// # Shares
//
// A document divides one gate's capacity among a workload's pods. Its
// per-pod fields (permits, ratePerSecond, burst, queueCapacity, workers,
// retryBudgetPerSecond) at the top level are the base share; pods maps a
// pod's name to a share of its own. A pod enforces Document.For(its name):
// its entry when present, else the base share, which is also what a pod that
// does not know its name enforces. The other fields (the queue wait and
// acquire bounds, latency, deadline) are shared by every pod.
//
// # Bounds
//
// Fields lists every number of a document with its unit and bounds: what
// one pod can hold (MaxPermits calls in flight and workers, as a gate
// counts) and what the DownstreamQuota API accepts. Parse and Validate
// reject a document with any value outside them, workers above permits, or
// a share that grants a waiting room, a rate or a retry budget without a
// permit; a reader keeps its last good plan. docs/reference/plan-bounds.md
// is generated from the same table.
//
// # Epoch, revision and acknowledgement
//
// epoch identifies the incarnation of the division, revision counts its
// published changes. The operator moves capacity to a pod only after the
// pods giving it up have acknowledged their smaller share: a pod annotates
// itself with applied.backpressure.dev/<gate>: Ack.String(), that is
// "<epoch>/<revision>" once it has applied that revision and its calls in
// flight are within the permits the revision gives it, and
// "<epoch>/released" when it shuts down and has handed its share back. See
// Ack.
//
// # Where documents live
//
// One ConfigMap per workload holds one key per DownstreamQuota that targets
// the workload. The key is KeyFor(quota), "<quota-name>.json", so a mounted
// volume is a directory with one file per gate and each quota's key changes
// on its own. The document's gate field repeats the quota name; a reader
// checks that it matches the key.
//
// # Wire format
//
// A document is one JSON object, written by Marshal with every field present
// and in a fixed order:
//
//	{"version":2,"gate":"logistics-api","downstream":"logistics.example.com",
//	 "hash":"…","generation":3,"epoch":"0f1e-uid","revision":17,
//	 "permits":5,"ratePerSecond":0,"burst":0,
//	 "queueCapacity":9,"maxQueueWaitSeconds":0.1,"acquireTimeoutSeconds":0.1,
//	 "latencySeconds":0.22,"deadlineSeconds":2,"workers":5,
//	 "retryBudgetPerSecond":1.25,
//	 "pods":{"search-gateway-7d9f-abcde":{"permits":6,"ratePerSecond":0,"burst":0,
//	         "queueCapacity":10,"workers":6,"retryBudgetPerSecond":1.5}}}
//
// pods is left out when it has no entry; its keys are written sorted, so
// the encoding is deterministic.
//
// A document of CompactVersion (3) carries the same content with the pods
// grouped by share: instead of pods, shares lists every distinct share once
// with the names of the pods that hold it, largest permits first, the names
// sorted. A division gives most pods one of two shares, so a pod costs its
// name and three bytes instead of a hundred and more: 37-character names
// (a Deployment's pods) fit about 30,800 to a ConfigMap's 1 MiB instead of
// about 7,800. The operator writes version 3 only when version 2 does not
// fit:
//
//	{"version":3, … the fields of version 2 but pods …,
//	 "shares":[{"permits":6,"ratePerSecond":0,"burst":0,"queueCapacity":10,
//	            "workers":6,"retryBudgetPerSecond":1.5,"pods":["a","b"]}]}
//
// Parse is strict where a mistake would silently change a limit: names are
// matched case-sensitively, a field (or a pod) given twice is an error (in
// version 3, a pod named in two shares too), and
// every field except downstream, hash, generation and pods is required, as
// is every field of every pods entry, because a missing permits read as
// zero would stop every call. Integer fields must be written as JSON
// integers. Errors name the field, a pod's as pods["<pod>"].<field>.
//
// # Compatibility
//
// version is a major version. A reader rejects every version other than
// CurrentVersion (2) and CompactVersion (3) with an error matching
// ErrUnsupportedVersion; a pod that reads a version 1 document keeps its
// last good plan, as a reader older than version 3 does with a version 3
// document. Within a major
// version a writer may only add optional fields whose absence keeps today's
// meaning; readers ignore fields they do not know, so an older runtime
// keeps working with a newer operator. Any change that an older reader
// would misread (a new required field, a changed unit or meaning) needs a
// new major version.
//
// # Hash
//
// Hash identifies a document's content: a SHA-256 over the canonical
// encoding of every field except hash and generation (epoch, revision and
// pods included), so rewriting the same plan for a newer quota generation
// keeps its hash, and the operator writes the ConfigMap only when a hash
// changes. The writer fills the hash field with Hash. Readers treat the
// field as an opaque identifier and do not recompute it to check it, because
// a newer writer's hash covers fields an older reader does not know. When the
// field is empty, Parse fills it with Hash of what it read.
package plan
