package main

import (
	"errors"
	"flag"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/sourceflags"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"POD_NAMESPACE": "shop", "POD_NAME": "search-gateway-0"}
	getenv := func(k string) string { return env[k] }
	downstream := &url.URL{Scheme: "http", Host: "logistics:8080"}
	defaults := config{
		listen: "127.0.0.1:8080", downstream: downstream, gate: "logistics-api", Flags: sourceflags.Flags{Namespace: "shop"},
		inboundPermits: 4096, shutdownTimeout: 30 * time.Second, pod: "search-gateway-0", reserveBudget: time.Millisecond,
	}
	with := func(f func(*config)) config {
		c := defaults
		f(&c)
		return c
	}
	required := []string{"--downstream", "http://logistics:8080", "--gate", "logistics-api"}
	tests := []struct {
		name    string
		args    []string
		want    config
		wantErr string
	}{{
		name: "configmap in the pod's namespace",
		args: append(required, "--configmap", "search-gateway-backpressure"),
		want: with(func(c *config) { c.ConfigMap = "search-gateway-backpressure" }),
	}, {
		name: "every flag",
		args: append(required, "--listen", "127.0.0.1:0", "--plan-dir", "/etc/backpressure", "--namespace", "other",
			"--kubeconfig", "/kc", "--acknowledge", "--max-retries", "1", "--retry-on-429", "--inbound-permits", "64",
			"--metrics-listen", "127.0.0.1:9090", "--shutdown-timeout", "5s", "--reserve-address", "search-gateway-broker:9443", "--reserve-budget", "5ms",
			"--reserve-return-early", "--reserve-ask-after", "5ms"),
		want: with(func(c *config) {
			c.listen, c.PlanDir, c.Namespace, c.Kubeconfig, c.Acknowledge = "127.0.0.1:0", "/etc/backpressure", "other", "/kc", true
			c.maxRetries, c.retryOn429, c.inboundPermits, c.metricsListen, c.shutdownTimeout = 1, true, 64, "127.0.0.1:9090", 5*time.Second
			c.reserveAddress, c.reserveBudget = "search-gateway-broker:9443", 5*time.Millisecond
			c.lendRules = gate.LendRules{ReturnEarly: true, AskAfter: 5 * time.Millisecond}
		}),
	}, {
		name:    "nothing",
		wantErr: "--downstream is required; --gate is required; exactly one of --configmap and --plan-dir is required",
	}, {
		name:    "both sources",
		args:    append(required, "--configmap", "x", "--plan-dir", "/d"),
		wantErr: "exactly one of --configmap and --plan-dir is required",
	}, {
		name:    "not a URL",
		args:    []string{"--downstream", "logistics:8080", "--gate", "g", "--plan-dir", "/d"},
		wantErr: `--downstream "logistics:8080" is not an http or https URL`,
	}, {
		name:    "out of range",
		args:    append(required, "--plan-dir", "/d", "--max-retries", "-1", "--inbound-permits", "0", "--shutdown-timeout", "0s", "--reserve-budget", "0s", "--reserve-ask-after", "-1ms"),
		wantErr: "--max-retries -1 must be at least 0; --inbound-permits 0 must be in [1, 1048575]; --reserve-budget 0s must be positive; --reserve-ask-after -1ms must not be negative; --shutdown-timeout 0s must be positive",
	}, {
		name:    "reserve address without a port",
		args:    append(required, "--plan-dir", "/d", "--reserve-address", "search-gateway-broker"),
		wantErr: `--reserve-address "search-gateway-broker" is not host:port`,
	}, {
		name:    "unknown flag",
		args:    append(required, "--plan-dir", "/d", "--retries", "1"),
		wantErr: "flag provided but not defined: -retries",
	}, {
		name:    "stray argument",
		args:    append(required, "--plan-dir", "/d", "extra"),
		wantErr: `unexpected arguments ["extra"]`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseConfig(tt.args, getenv, io.Discard)
			if tt.wantErr != "" {
				if err == nil || strings.ReplaceAll(err.Error(), "\n", "; ") != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(config{})); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// A pod that borrows names itself to the permit server, which counts
// borrows per pod: without $POD_NAME the flag is refused.
func TestParseConfigReserveNeedsThePodName(t *testing.T) {
	args := []string{"--downstream", "http://logistics:8080", "--gate", "g", "--plan-dir", "/d", "--reserve-address", "127.0.0.1:9443"}
	_, err := parseConfig(args, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--reserve-address needs $POD_NAME") {
		t.Fatalf("err = %v, want one naming --reserve-address and $POD_NAME", err)
	}
}

func TestParseConfigConfigMapNeedsANamespace(t *testing.T) {
	_, err := parseConfig([]string{"--downstream", "http://d", "--gate", "g", "--configmap", "cm"},
		func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--configmap needs --namespace or $POD_NAMESPACE") {
		t.Errorf("err = %v", err)
	}
}

func TestParseConfigHelp(t *testing.T) {
	var usage strings.Builder
	_, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &usage)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "-retry-on-429") {
		t.Errorf("err = %v, usage:\n%s", err, usage.String())
	}
}

// --reserve-offer offers the gate's idle permits to the permit server of
// --reserve-address, keeping --reserve-offer-keep; off by default.
func TestParseConfigReserveOffer(t *testing.T) {
	pod := func(k string) string { return map[string]string{"POD_NAME": "search-gateway-0"}[k] }
	base := []string{"--downstream", "http://logistics:8080", "--gate", "g", "--plan-dir", "/d", "--reserve-address", "broker:9443"}
	c, err := parseConfig(base, pod, io.Discard)
	if err != nil || c.reserveOffer || c.reserveOfferKeep != 0 {
		t.Errorf("defaults: offer %v, keep %d, %v; want off, 0", c.reserveOffer, c.reserveOfferKeep, err)
	}
	c, err = parseConfig(append(base, "--reserve-offer", "--reserve-offer-keep", "2"), pod, io.Discard)
	if err != nil || !c.reserveOffer || c.reserveOfferKeep != 2 {
		t.Errorf("offer %v, keep %d, %v; want on, 2", c.reserveOffer, c.reserveOfferKeep, err)
	}
	if f := c.reserveFlags(); !f.Offer || f.OfferKeep != 2 || f.Address != "broker:9443" || f.Budget != time.Millisecond {
		t.Errorf("reserve flags %+v", f)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--downstream", "http://d", "--gate", "g", "--plan-dir", "/d", "--reserve-offer"}, "--reserve-offer needs --reserve-address, the permit server to offer to"},
		{append(base, "--reserve-offer-keep", "-1"), "--reserve-offer-keep -1 must not be negative"},
	} {
		if _, err := parseConfig(tt.args, pod, io.Discard); err == nil || err.Error() != tt.want {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}
}
