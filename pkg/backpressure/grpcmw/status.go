package grpcmw

import (
	"errors"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// Domain is the google.rpc.ErrorInfo domain of a gate's rejections.
const Domain = "backpressure.dev"

// Keys of the google.rpc.ErrorInfo metadata of a gate's rejections.
const (
	// MetadataGate holds the name of the gate that rejected the call.
	MetadataGate = "gate"
	// MetadataPermits holds the gate's in-flight limit when it rejected the
	// call, in decimal.
	MetadataPermits = "permits"
)

// ErrorReason returns the google.rpc.ErrorInfo reason for r: its name in
// upper snake case, e.g. RATE_LIMITED, as ErrorInfo reasons are written.
func ErrorReason(r gate.Reason) string {
	return strings.ToUpper(r.String())
}

// rejectionError is a gate's rejection as a gRPC status: status.FromError
// and status.Code read the status, and errors.As reaches the rejection.
type rejectionError struct {
	rejection *gate.Rejection
	status    *status.Status
}

// Error returns the text of the status error.
func (e *rejectionError) Error() string { return e.status.Err().Error() }

// GRPCStatus returns the status, for status.FromError and grpc-go.
func (e *rejectionError) GRPCStatus() *status.Status { return e.status }

// Unwrap returns the gate's rejection.
func (e *rejectionError) Unwrap() error { return e.rejection }

// admissionError turns an error from g.Acquire into the error the call ends
// with: a rejection becomes RESOURCE_EXHAUSTED with its details, the end of
// the context the status grpc-go would give it.
func admissionError(g *gate.Gate, err error) error {
	rej, ok := errors.AsType[*gate.Rejection](err)
	if !ok {
		return status.FromContextError(err).Err()
	}
	st := status.New(codes.ResourceExhausted, rej.Error())
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{
		Reason: ErrorReason(rej.Reason),
		Domain: Domain,
		Metadata: map[string]string{
			MetadataGate:    rej.Gate,
			MetadataPermits: strconv.Itoa(g.Limits().Permits),
		},
	}}
	if rej.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(rej.RetryAfter)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return &rejectionError{rejection: rej, status: st}
}
