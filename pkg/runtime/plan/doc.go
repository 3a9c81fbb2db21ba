// Package plan defines the per-pod plan document that the operator publishes
// in a workload's ConfigMap and that the runtime library enforces: its Go
// type, its wire format, its validation and its content hash.
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
//	{"version":1,"gate":"logistics-api","downstream":"logistics.example.com",
//	 "hash":"…","generation":3,
//	 "permits":5,"ratePerSecond":0,"burst":0,
//	 "queueCapacity":9,"maxQueueWaitSeconds":0.1,"acquireTimeoutSeconds":0.1,
//	 "latencySeconds":0.22,"deadlineSeconds":2,"workers":5,
//	 "retryBudgetPerSecond":1.25}
//
// Parse is strict where a mistake would silently change a limit: names are
// matched case-sensitively, a field given twice is an error, and every field
// of version 1 except downstream, hash and generation is required, because a
// missing permits read as zero would stop every call. Integer fields must be
// written as JSON integers.
//
// # Compatibility
//
// version is a major version. A reader rejects every version other than
// CurrentVersion. Within a major version a writer may only add optional
// fields whose absence keeps today's meaning; readers ignore fields they do
// not know, so an older runtime keeps working with a newer operator. Any
// change that an older reader would misread (a new required field, a changed
// unit or meaning) needs a new major version.
//
// # Hash
//
// Hash identifies a document's content: a SHA-256 over the canonical
// encoding of every field except hash and generation, so rewriting the same
// plan for a newer quota generation keeps its hash, and the operator writes
// the ConfigMap only when a hash changes. The writer fills the hash field
// with Hash; pods acknowledge a plan by echoing that value. Readers treat the
// field as an opaque identifier and do not recompute it to check it, because
// a newer writer's hash covers fields an older reader does not know. When the
// field is empty, Parse fills it with Hash of what it read.
package plan
