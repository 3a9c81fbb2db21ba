package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfig(t *testing.T) {
	env := func(k string) string { return map[string]string{"POD_NAMESPACE": "shop"}[k] }
	c, err := parseConfig([]string{
		"--route", "listen=127.0.0.1:9001,gate=logistics-api,upstream=https://logistics.example.com/v2",
		"--route", "listen=127.0.0.1:9002,gate=payments-api,upstream=http://payments:8080",
		"--forward-listen", "127.0.0.1:3128",
		"--forward-host", "Payments.Internal=payments-api",
		"--forward-host", "geo.internal:8443=geo-api",
		"--configmap", "search-gateway-backpressure",
	}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "shop" || c.ConfigMap != "search-gateway-backpressure" {
		t.Errorf("namespace %q, configmap %q", c.Namespace, c.ConfigMap)
	}
	// The metrics stay in the pod; the probes have a port of their own.
	if c.metricsListen != "127.0.0.1:9090" || c.probeListen != ":9091" || c.listenAnywhere || c.maxCallDuration != 0 {
		t.Errorf("metrics %q, probes %q, non-loopback listens %v, max call %v; want 127.0.0.1:9090, :9091, false, 0",
			c.metricsListen, c.probeListen, c.listenAnywhere, c.maxCallDuration)
	}
	if len(c.routes) != 2 || c.routes[0].listen != "127.0.0.1:9001" || c.routes[0].gate != "logistics-api" ||
		c.routes[0].upstream.String() != "https://logistics.example.com/v2" {
		t.Errorf("routes %+v", c.routes)
	}
	if diff := cmp.Diff(map[string]string{"payments.internal": "payments-api", "geo.internal:8443": "geo-api"}, c.forwardHosts); diff != "" {
		t.Errorf("forward hosts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"geo-api", "logistics-api", "payments-api"}, c.gates()); diff != "" {
		t.Errorf("gates (-want +got):\n%s", diff)
	}
}

func TestParseConfigErrorsNameTheFlag(t *testing.T) {
	route := "listen=127.0.0.1:9001,gate=a,upstream=http://a"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--plan-dir", "/p"}, "at least one --route or --forward-listen"},
		{[]string{"--route", route}, "exactly one of --configmap and --plan-dir"},
		{[]string{"--route", route, "--configmap", "cm"}, "--configmap needs --namespace"},
		{[]string{"--route", "listen=9001,gate=a,upstream=http://a", "--plan-dir", "/p"}, `listen "9001" is not host:port`},
		{[]string{"--route", "listen=127.0.0.1:9001,upstream=http://a", "--plan-dir", "/p"}, "gate is required"},
		{[]string{"--route", "listen=127.0.0.1:9001,gate=a,upstream=ftp://a", "--plan-dir", "/p"}, `upstream "ftp://a" is not an http or https URL`},
		{[]string{"--route", "listen=127.0.0.1:9001,gate=a,upstream=http://a/?x=1", "--plan-dir", "/p"}, "without user, query or fragment"},
		{[]string{"--route", "listen=127.0.0.1:9001,gate=a,port=1", "--plan-dir", "/p"}, `unknown key "port"`},
		{[]string{"--route", route, "--route", route, "--plan-dir", "/p"}, `listen address "127.0.0.1:9001" is used twice`},
		{[]string{"--forward-listen", "127.0.0.1:3128", "--plan-dir", "/p"}, "--forward-listen and --forward-host go together"},
		{[]string{"--forward-host", "a=b", "--route", route, "--plan-dir", "/p"}, "--forward-listen and --forward-host go together"},
		{[]string{"--forward-listen", "127.0.0.1:1", "--forward-host", "a", "--plan-dir", "/p"}, `"a" is not HOST[:PORT]=GATE`},
		{[]string{"--forward-listen", "127.0.0.1:1", "--forward-host", "http://a=b", "--plan-dir", "/p"}, "must be a host name or host:port"},
		{[]string{"--forward-listen", "127.0.0.1:1", "--forward-host", "a=b", "--forward-host", "A=c", "--plan-dir", "/p"}, `host "a" is mapped to both "b" and "c"`},
		{[]string{"--route", route, "--plan-dir", "/p", "--shutdown-timeout", "0s"}, "--shutdown-timeout 0s must be positive"},
		{[]string{"--route", route, "--plan-dir", "/p", "--max-call-duration", "-1s"}, "--max-call-duration -1s must not be negative"},
		// Routes and the forwarding port listen on loopback unless told.
		{[]string{"--route", "listen=:9001,gate=a,upstream=http://a", "--plan-dir", "/p"}, `listen address ":9001" is not loopback`},
		{[]string{"--route", "listen=0.0.0.0:9001,gate=a,upstream=http://a", "--plan-dir", "/p"}, `listen address "0.0.0.0:9001" is not loopback`},
		{[]string{"--route", "listen=10.1.2.3:9001,gate=a,upstream=http://a", "--plan-dir", "/p"}, "give --listen-non-loopback"},
		{[]string{"--forward-listen", "[::]:3128", "--forward-host", "a=b", "--plan-dir", "/p"}, `listen address "[::]:3128" is not loopback`},
		{[]string{"--route", route, "--plan-dir", "/p", "extra"}, "unexpected arguments"},
	} {
		_, err := parseConfig(c.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseConfig(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
}

// With --listen-non-loopback a route may listen where other pods reach it;
// loopback in any of its spellings needs no flag.
func TestParseConfigListens(t *testing.T) {
	for _, c := range []struct {
		listen string
		extra  []string
	}{
		{"127.0.0.1:9001", nil}, {"127.0.0.2:9001", nil}, {"[::1]:9001", nil}, {"localhost:9001", nil},
		{":9001", []string{"--listen-non-loopback"}}, {"10.1.2.3:9001", []string{"--listen-non-loopback"}},
	} {
		args := append([]string{"--route", "listen=" + c.listen + ",gate=a,upstream=http://a", "--plan-dir", "/p"}, c.extra...)
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err != nil {
			t.Errorf("parseConfig(%q): %v", args, err)
		}
	}
}

func TestParseConfigHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"Usage: backpressure-proxy", "-route", "-forward-host", "-acknowledge"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

// --reserve-offer offers the gates' idle permits to the permit server of
// --reserve-address, each gate keeping --reserve-offer-keep; off by
// default.
func TestParseConfigReserveOffer(t *testing.T) {
	base := []string{"--plan-dir", "/d", "--route", "listen=127.0.0.1:0,gate=g,upstream=http://127.0.0.1:1"}
	pod := func(k string) string { return map[string]string{"POD_NAME": "p"}[k] }
	c, err := parseConfig(append(base, "--reserve-address", "broker:9443"), pod, io.Discard)
	if err != nil || c.reserveOffer || c.reserveOfferKeep != 0 {
		t.Errorf("defaults: offer %v, keep %d, %v; want off, 0", c.reserveOffer, c.reserveOfferKeep, err)
	}
	c, err = parseConfig(append(base, "--reserve-address", "broker:9443", "--reserve-offer", "--reserve-offer-keep", "2"), pod, io.Discard)
	if err != nil || !c.reserveOffer || c.reserveOfferKeep != 2 {
		t.Errorf("offer %v, keep %d, %v; want on, 2", c.reserveOffer, c.reserveOfferKeep, err)
	}
	if f := c.reserveFlags(); !f.Offer || f.OfferKeep != 2 || f.Address != "broker:9443" {
		t.Errorf("reserve flags %+v", f)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--reserve-offer"}, "--reserve-offer needs --reserve-address"},
		{[]string{"--reserve-address", "broker:9443", "--reserve-offer-keep", "-1"}, "--reserve-offer-keep -1 must not be negative"},
	} {
		if _, err := parseConfig(append(base, tt.args...), pod, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}
}

// The help names every reserve flag, and says of --reserve-address that
// every call then gets the plan's deadline.
func TestParseConfigHelpReserve(t *testing.T) {
	var usage strings.Builder
	if _, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	for _, want := range []string{"-reserve-address", "every call then gets the plan's deadline", "-reserve-budget", "-reserve-return-early", "-reserve-ask-after", "-reserve-offer", "-reserve-offer-keep"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("usage without %q:\n%s", want, usage.String())
		}
	}
}
