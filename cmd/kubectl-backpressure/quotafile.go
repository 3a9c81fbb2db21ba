package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

const (
	quotaKind    = "DownstreamQuota"
	contractKind = "DownstreamContract"
)

// durationFields are the spec's metav1.Duration fields. The JSON decoder
// reports a malformed duration without saying which field held it, so they
// are checked by path first.
var durationFields = [][]string{
	{"spec", "latency", "typical"},
	{"spec", "latency", "worst"},
	{"spec", "deadline"},
	{"spec", "maxQueueWait"},
	{"spec", "acquireTimeout"},
	{"spec", "handover", "unacknowledgedDelay"},
	{"spec", "handover", "stalledAfter"},
}

// contractDurationFields are a DownstreamContract's metav1.Duration fields.
var contractDurationFields = [][]string{
	{"spec", "handover", "unacknowledgedDelay"},
	{"spec", "handover", "stalledAfter"},
}

// loadQuota reads the DownstreamQuota in a YAML or JSON file. The file may
// hold several documents (a quota with its Deployment and HPA) when exactly
// one of them is a DownstreamQuota of backpressure.dev/v1alpha1. Decoding is
// strict: unknown or duplicate fields are errors, and every error names the
// file and the field.
func loadQuota(path string, stdin io.Reader) (*v1alpha1.DownstreamQuota, error) {
	docs, err := readDocuments(path, stdin)
	if err != nil {
		return nil, err
	}
	doc, err := pickQuota(docs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	q := &v1alpha1.DownstreamQuota{}
	if err := decodeStrict(doc, q, durationFields); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkWorkloadRef(q.Spec.WorkloadRef); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return q, nil
}

// checkWorkloadRef checks spec.workloadRef as the API's schema does, so
// that a quota the API server would refuse is not planned: the calculator
// does not read the workload, so nothing else would notice a kind the
// operator cannot follow.
func checkWorkloadRef(ref v1alpha1.WorkloadReference) error {
	switch {
	case ref.APIVersion != "" && ref.APIVersion != "apps/v1":
		return fmt.Errorf("spec.workloadRef.apiVersion: must be apps/v1, got %q", ref.APIVersion)
	case ref.Kind != "Deployment" && ref.Kind != "StatefulSet":
		return fmt.Errorf("spec.workloadRef.kind: must be Deployment or StatefulSet, got %q", ref.Kind)
	case ref.Name == "":
		return errors.New("spec.workloadRef.name: required")
	}
	return nil
}

// loadQuotas reads every DownstreamQuota of backpressure.dev/v1alpha1 in a
// file, at least one; other documents are skipped.
func loadQuotas(path string, stdin io.Reader) ([]v1alpha1.DownstreamQuota, error) {
	docs, err := readDocuments(path, stdin)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.DownstreamQuota
	for _, doc := range docs {
		if m, err := typeMetaOf(doc); err != nil || checkTypeMeta(m, quotaKind) != nil {
			continue
		}
		var q v1alpha1.DownstreamQuota
		if err := decodeStrict(doc, &q, durationFields); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := checkWorkloadRef(q.Spec.WorkloadRef); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, q.Name, err)
		}
		out = append(out, q)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: kind: none of its %d documents is a %s of %s", path, len(docs), quotaKind, v1alpha1.GroupVersion)
	}
	return out, nil
}

// loadContract reads the one DownstreamContract of backpressure.dev/v1alpha1
// in a file; other documents are skipped.
func loadContract(path string, stdin io.Reader) (*v1alpha1.DownstreamContract, error) {
	docs, err := readDocuments(path, stdin)
	if err != nil {
		return nil, err
	}
	var found []byte
	for _, doc := range docs {
		if m, err := typeMetaOf(doc); err != nil || checkTypeMeta(m, contractKind) != nil {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%s: kind: holds more than one %s; give one per file", path, contractKind)
		}
		found = doc
	}
	if found == nil {
		return nil, fmt.Errorf("%s: kind: none of its %d documents is a %s of %s", path, len(docs), contractKind, v1alpha1.GroupVersion)
	}
	c := &v1alpha1.DownstreamContract{}
	if err := decodeStrict(found, c, contractDurationFields); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// stdinPath is the file name that stands for the standard input, as in
// kubectl apply -f -.
const stdinPath = "-"

// readDocuments reads a file's YAML or JSON documents as JSON; the path
// stdinPath reads them from stdin.
func readDocuments(path string, stdin io.Reader) ([][]byte, error) {
	var data []byte
	var err error
	if path == stdinPath {
		data, err = io.ReadAll(stdin)
		if err == nil && len(bytes.TrimSpace(data)) == 0 {
			// An empty stdin is most often a forgotten pipe: say so
			// rather than "holds no document".
			return nil, errors.New("-: the standard input is empty; pipe a manifest into -f -")
		}
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return docs, nil
}

func typeMetaOf(doc []byte) (typeMeta, error) {
	var m typeMeta
	err := json.Unmarshal(doc, &m)
	return m, err
}

// splitDocuments returns the non-empty documents of a YAML stream as JSON.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, err
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		docs = append(docs, j)
	}
	if len(docs) == 0 {
		return nil, errors.New("holds no document")
	}
	return docs, nil
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// pickQuota returns the one DownstreamQuota document, or says which field
// of a lone document is wrong.
func pickQuota(docs [][]byte) ([]byte, error) {
	metas := make([]typeMeta, len(docs))
	for i, doc := range docs {
		if err := json.Unmarshal(doc, &metas[i]); err != nil {
			return nil, fmt.Errorf("document %d is not an object: %w", i+1, err)
		}
	}
	if len(docs) == 1 {
		return docs[0], checkTypeMeta(metas[0], quotaKind)
	}
	var found []byte
	for i, m := range metas {
		if checkTypeMeta(m, quotaKind) != nil {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("kind: holds more than one %s; give one per file", quotaKind)
		}
		found = docs[i]
	}
	if found == nil {
		return nil, fmt.Errorf("kind: none of its %d documents is a %s of %s", len(docs), quotaKind, v1alpha1.GroupVersion)
	}
	return found, nil
}

func checkTypeMeta(m typeMeta, kind string) error {
	if m.Kind != kind {
		return fmt.Errorf("kind: must be %s, got %q", kind, m.Kind)
	}
	if m.APIVersion != v1alpha1.GroupVersion.String() {
		return fmt.Errorf("apiVersion: must be %s, got %q", v1alpha1.GroupVersion, m.APIVersion)
	}
	return nil
}

// decodeStrict decodes one JSON document into v strictly, checking the
// duration fields at durations first so that an error names the field.
func decodeStrict(doc []byte, v any, durations [][]string) error {
	var generic map[string]any
	if err := json.Unmarshal(doc, &generic); err != nil {
		return err
	}
	for _, path := range durations {
		val, ok := lookup(generic, path)
		if !ok {
			continue
		}
		s, isString := val.(string)
		if !isString {
			return fmt.Errorf("%s: must be a duration such as 220ms, got %v", strings.Join(path, "."), val)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Errorf("%s: must be a duration such as 220ms, got %q", strings.Join(path, "."), s)
		}
	}
	strict, err := sigsjson.UnmarshalStrict(doc, v)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return strict[0]
	}
	return nil
}

// lookup follows path through nested objects.
func lookup(obj map[string]any, path []string) (any, bool) {
	var cur any = obj
	for _, key := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[key]; !ok {
			return nil, false
		}
	}
	return cur, true
}
