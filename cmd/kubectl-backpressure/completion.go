package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// completionTimeout bounds the API calls of one completion, so that a
// shell never hangs on an unreachable cluster.
const completionTimeout = 5 * time.Second

// completeQuotaNames completes the names of the DownstreamQuotas of the
// namespace of -n (or of the context), each with prefix before it: "" for
// status QUOTA, "dq/" for plan dq/NAME. Only the first argument is
// completed.
func completeQuotaNames(config *genericclioptions.ConfigFlags, prefix string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := connect(config)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		quotas, err := c.quotas(ctx, c.namespace)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, q := range quotas {
			name := prefix + q.Name
			if strings.HasPrefix(name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(name, q.Spec.Downstream))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// registerLiveCompletions completes --namespace with the cluster's
// namespaces, as kubectl does.
func registerLiveCompletions(cmd *cobra.Command, config *genericclioptions.ConfigFlags) {
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := connect(config)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		var list corev1.NamespaceList
		if err := c.client.List(ctx, &list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, toComplete) {
				out = append(out, ns.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
}
