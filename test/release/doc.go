// Package release tests what `make release` publishes: it runs
// hack/release.sh into a temporary directory and checks every artifact as a
// user, Helm and krew would read it. The archives hold the binaries, LICENSE
// and README.md, and the binaries were built static, with -trimpath, for
// their platform, with the version stamped in (the host's binaries are run
// with --version); checksums.txt matches the files; install.yaml decodes
// into the CRD, the RBAC and the manager Deployment with the release's
// image; the chart archive loads in Helm and renders that image; the krew
// manifest is a valid krew Plugin whose digests are the archives'.
//
// The images cannot be built here, without a container engine, so
// TestDockerfileStagesBuild runs the go build of each builder stage of the
// Dockerfile as written, from a directory holding only what the stage
// copies out of the build context .dockerignore leaves, and checks the
// binaries' --version.
//
// The release is built for the host platform only, to keep the test fast;
// RELEASE_TEST_PLATFORMS="linux/amd64 darwin/arm64" builds and checks others
// too. The release renders install.yaml with the kubectl built beside the
// control plane (internal/testenv) and packages the chart with the Helm
// pinned in hack/tools/helm, whose first build takes minutes (`make tools`).
package release
