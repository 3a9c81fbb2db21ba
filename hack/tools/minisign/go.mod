module backpressure.dev/hack/tools/minisign

go 1.26.0

tool aead.dev/minisign/cmd/minisign

require (
	aead.dev/minisign v0.3.0 // indirect
	golang.org/x/crypto v0.59.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/term v0.48.0 // indirect
)
