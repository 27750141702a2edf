
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'certgen' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'certgen'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'certgen' {
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Built-in profile to use [default: envoy-gateway]')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'YAML config file (start from `certgen profile show`)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--cluster-domain', '--cluster-domain', [CompletionResultType]::ParameterName, 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]')
            [CompletionResult]::new('--cluster-name', '--cluster-name', [CompletionResultType]::ParameterName, 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]')
            [CompletionResult]::new('--renewal-window', '--renewal-window', [CompletionResultType]::ParameterName, 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows')
            [CompletionResult]::new('--renewal-window-margin', '--renewal-window-margin', [CompletionResultType]::ParameterName, 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]')
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]')
            [CompletionResult]::new('--local', '--local', [CompletionResultType]::ParameterName, 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]')
            [CompletionResult]::new('--config-home', '--config-home', [CompletionResultType]::ParameterName, 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local')
            [CompletionResult]::new('--topology-injector', '--topology-injector', [CompletionResultType]::ParameterName, 'The topology injector''s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace, and says which it used')
            [CompletionResult]::new('--cluster-trust-bundle', '--cluster-trust-bundle', [CompletionResultType]::ParameterName, 'Also publish the first TLS Secret''s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config''s `clusterTrustBundles:` sets labels and the Secret')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Format of the report on standard output (prometheus: metrics in Prometheus'' text format)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)')
            [CompletionResult]::new('--add-member', '--add-member', [CompletionResultType]::ParameterName, 'With several --context: this context''s cluster joins the set (it enters through a trust step). Repeatable')
            [CompletionResult]::new('--remove-member', '--remove-member', [CompletionResultType]::ParameterName, 'With several --context: take this member (its kube-system UID, or its context) out of the set. Repeatable')
            [CompletionResult]::new('--strategy', '--strategy', [CompletionResultType]::ParameterName, 'How a rotation reaches consumers: staged (trust first, then leaves) or immediate (one write)')
            [CompletionResult]::new('--propagation-delay', '--propagation-delay', [CompletionResultType]::ParameterName, 'How long hot-reloading consumers get to load a change before the next rotation phase relies on it [default: 2m in a cluster, 0s with --local]')
            [CompletionResult]::new('--poke-rate', '--poke-rate', [CompletionResultType]::ParameterName, 'At most N of a gate''s requests (pod pokes, node Lease reads) started per second, evenly paced, 8 in flight per 100 [default: 100]. Raise it to rotate thousands of pods faster where the control plane has room; see docs/api-requests.md')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Bound on all waiting and probing (e.g. 90s, 5m)')
            [CompletionResult]::new('--metrics-file', '--metrics-file', [CompletionResultType]::ParameterName, 'Also write the run''s metrics (what `check --output prometheus` shows after the run, plus its outcome, duration, writes and API requests) to FILE for node-exporter''s textfile collector, replacing it atomically')
            [CompletionResult]::new('--stuck-after', '--stuck-after', [CompletionResultType]::ParameterName, 'With --events: how long past its gate (the propagation delay after the phase began) a rotation may stay in one phase before a RotationStuck Warning')
            [CompletionResult]::new('--pushgateway', '--pushgateway', [CompletionResultType]::ParameterName, 'Also push the run''s metrics to this Pushgateway (base URL, e.g. `http://pushgateway.monitoring:9091`), replacing the group job=certgen, namespace, profile')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('--disable-topology-injector', '--disable-topology-injector', [CompletionResultType]::ParameterName, 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step')
            [CompletionResult]::new('-o', '-o', [CompletionResultType]::ParameterName, 'Rotate now: a new CA, bundled with at most one prior CA, and new leaves')
            [CompletionResult]::new('--overwrite', '--overwrite', [CompletionResultType]::ParameterName, 'Rotate now: a new CA, bundled with at most one prior CA, and new leaves')
            [CompletionResult]::new('--respect-window', '--respect-window', [CompletionResultType]::ParameterName, 'With --overwrite: wait for a renewal window too (by default a rotation asked for by hand starts at once, windows or not)')
            [CompletionResult]::new('--rotate-hmac', '--rotate-hmac', [CompletionResultType]::ParameterName, 'Also replace HMAC Secrets (they are left alone otherwise)')
            [CompletionResult]::new('--force', '--force', [CompletionResultType]::ParameterName, 'Take over Secrets owned by another manager and replace unusable contents')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait for the rollouts of restarted workloads (Deployments, StatefulSets, DaemonSets) before exiting (and for a cleanup gate that only --propagation-delay can open)')
            [CompletionResult]::new('--no-poke', '--no-poke', [CompletionResultType]::ParameterName, 'Never annotate the pods that mount a changed Secret (which makes their kubelet load it at once and lets gates open on that evidence): every gate waits out --propagation-delay')
            [CompletionResult]::new('--probe', '--probe', [CompletionResultType]::ParameterName, 'Verify over TLS that probed consumers serve the new certificates before exiting')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print the plan; generate and write nothing')
            [CompletionResult]::new('--events', '--events', [CompletionResultType]::ParameterName, 'Record Kubernetes Events (events.k8s.io/v1) on the Secrets, restarted workloads and caBundle targets: each write and restart, and a Warning for a certificate past its renewal time, an expired CA, or a rotation stuck past its gate. Needs create, get and patch on events (in `default` too for the Events of webhook configurations and APIServices, which are cluster-scoped); a refusal is a warning, never a failed run')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Report expiry, trust and consistency of every Secret; exit 1 when action is due')
            [CompletionResult]::new('profile', 'profile', [CompletionResultType]::ParameterValue, 'Built-in profiles')
            [CompletionResult]::new('exporter', 'exporter', [CompletionResultType]::ParameterValue, 'Serve the metrics of `check --output prometheus` on /metrics, from watches')
            [CompletionResult]::new('create', 'create', [CompletionResultType]::ParameterValue, 'kube-webhook-certgen''s `create`: a CA and a serving certificate in a new Secret')
            [CompletionResult]::new('patch', 'patch', [CompletionResultType]::ParameterValue, 'kube-webhook-certgen''s `patch`: the Secret''s CA into webhook configurations'' caBundle')
            [CompletionResult]::new('handover', 'handover', [CompletionResultType]::ParameterValue, 'Hand certgen''s Secrets over to cert-manager with no TLS gap')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print shell completions')
            [CompletionResult]::new('man', 'man', [CompletionResultType]::ParameterValue, 'Print the man page certgen(1) (roff), or write every page with --dir')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'certgen;check' {
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Built-in profile to use [default: envoy-gateway]')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'YAML config file (start from `certgen profile show`)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--cluster-domain', '--cluster-domain', [CompletionResultType]::ParameterName, 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]')
            [CompletionResult]::new('--cluster-name', '--cluster-name', [CompletionResultType]::ParameterName, 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]')
            [CompletionResult]::new('--renewal-window', '--renewal-window', [CompletionResultType]::ParameterName, 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows')
            [CompletionResult]::new('--renewal-window-margin', '--renewal-window-margin', [CompletionResultType]::ParameterName, 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]')
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]')
            [CompletionResult]::new('--local', '--local', [CompletionResultType]::ParameterName, 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]')
            [CompletionResult]::new('--config-home', '--config-home', [CompletionResultType]::ParameterName, 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local')
            [CompletionResult]::new('--topology-injector', '--topology-injector', [CompletionResultType]::ParameterName, 'The topology injector''s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace, and says which it used')
            [CompletionResult]::new('--cluster-trust-bundle', '--cluster-trust-bundle', [CompletionResultType]::ParameterName, 'Also publish the first TLS Secret''s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config''s `clusterTrustBundles:` sets labels and the Secret')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Format of the report on standard output (prometheus: metrics in Prometheus'' text format)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('--disable-topology-injector', '--disable-topology-injector', [CompletionResultType]::ParameterName, 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;profile' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Print a built-in profile as YAML, a starting point for --config')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the built-in profiles, one line each: its name and whose Secrets it writes')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'certgen;profile;show' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;profile;list' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;profile;help' {
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Print a built-in profile as YAML, a starting point for --config')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the built-in profiles, one line each: its name and whose Secrets it writes')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'certgen;profile;help;show' {
            break
        }
        'certgen;profile;help;list' {
            break
        }
        'certgen;profile;help;help' {
            break
        }
        'certgen;exporter' {
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Built-in profile to use [default: envoy-gateway]')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'YAML config file (start from `certgen profile show`)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--cluster-domain', '--cluster-domain', [CompletionResultType]::ParameterName, 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]')
            [CompletionResult]::new('--cluster-name', '--cluster-name', [CompletionResultType]::ParameterName, 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]')
            [CompletionResult]::new('--renewal-window', '--renewal-window', [CompletionResultType]::ParameterName, 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows')
            [CompletionResult]::new('--renewal-window-margin', '--renewal-window-margin', [CompletionResultType]::ParameterName, 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]')
            [CompletionResult]::new('--topology-injector', '--topology-injector', [CompletionResultType]::ParameterName, 'The topology injector''s MutatingWebhookConfiguration when Kustomize renamed it. Without it, a renamed one is found as a run finds it: the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace (when this identity may list and watch mutatingwebhookconfigurations)')
            [CompletionResult]::new('--cluster-trust-bundle', '--cluster-trust-bundle', [CompletionResultType]::ParameterName, 'Watch the ClusterTrustBundles certgen publishes for SIGNER (as `run --cluster-trust-bundle`). Repeatable')
            [CompletionResult]::new('--listen', '--listen', [CompletionResultType]::ParameterName, 'Address to serve /metrics, /healthz and /readyz on')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'Kubeconfig context to use')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('--disable-topology-injector', '--disable-topology-injector', [CompletionResultType]::ParameterName, 'Do not watch Envoy Gateway''s topology injector webhook (its caBundle metrics)')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;create' {
            [CompletionResult]::new('--host', '--host', [CompletionResultType]::ParameterName, 'Comma-separated host names and IP addresses the serving certificate is valid for (required)')
            [CompletionResult]::new('--secret-name', '--secret-name', [CompletionResultType]::ParameterName, 'Name of the Secret to create (required)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Secret (required)')
            [CompletionResult]::new('--secret-type', '--secret-type', [CompletionResultType]::ParameterName, 'Type of the Secret')
            [CompletionResult]::new('--ca-name', '--ca-name', [CompletionResultType]::ParameterName, 'Key of the CA certificate in the Secret')
            [CompletionResult]::new('--cert-name', '--cert-name', [CompletionResultType]::ParameterName, 'Key of the serving certificate in the Secret')
            [CompletionResult]::new('--key-name', '--key-name', [CompletionResultType]::ParameterName, 'Key of the serving certificate''s private key in the Secret')
            [CompletionResult]::new('--validity', '--validity', [CompletionResultType]::ParameterName, 'Validity of the CA and the serving certificate (certgen''s addition) [default: 36500d, kube-webhook-certgen''s 100 years]. With a caBundle target, an existing Secret whose certificates last longer (kube-webhook-certgen''s 100 years) is rotated to certificates of this validity, staged, once')
            [CompletionResult]::new('--renew-before', '--renew-before', [CompletionResultType]::ParameterName, 'Renew the CA and the serving certificate this long before they expire (certgen''s addition) [default: a third of --validity]. An existing Secret that is due is renewed only with a caBundle target (--webhook-name or --apiservice-name), through a staged rotation; without one it is kept, with a warning')
            [CompletionResult]::new('--webhook-name', '--webhook-name', [CompletionResultType]::ParameterName, 'The ValidatingWebhookConfiguration and MutatingWebhookConfiguration whose caBundle follows the Secret''s CA through a renewal, as `patch` names them (certgen''s addition)')
            [CompletionResult]::new('--apiservice-name', '--apiservice-name', [CompletionResultType]::ParameterName, 'An APIService whose caBundle follows the Secret''s CA through a renewal (certgen''s addition)')
            [CompletionResult]::new('--patch-validating', '--patch-validating', [CompletionResultType]::ParameterName, 'With --webhook-name: the ValidatingWebhookConfiguration follows (`--patch-validating=false`: leave it alone)')
            [CompletionResult]::new('--patch-mutating', '--patch-mutating', [CompletionResultType]::ParameterName, 'With --webhook-name: the MutatingWebhookConfiguration follows (`--patch-mutating=false`: leave it alone)')
            [CompletionResult]::new('--ca-secret-name', '--ca-secret-name', [CompletionResultType]::ParameterName, 'The Secret holding certgen''s CA and its key, created when a renewal starts (certgen''s addition) [default: the --secret-name with -ca appended]')
            [CompletionResult]::new('--propagation-delay', '--propagation-delay', [CompletionResultType]::ParameterName, 'How long the webhook and the API server get to load each step of a renewal before the next relies on it (certgen''s addition) [default: 2m]')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Bound on a renewal''s waiting (certgen''s addition); on timeout the run exits 3 with every step so far safe, and the next `create` resumes [default: 5m]')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]')
            [CompletionResult]::new('--log-level', '--log-level', [CompletionResultType]::ParameterName, 'Log level on standard error (kube-webhook-certgen''s spelling; -v and -q work too)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('--print-config', '--print-config', [CompletionResultType]::ParameterName, 'Print, as YAML, the config certgen renews this Secret with (its layout, certgen''s CA Secret, the renewal windows and the caBundle targets above) and exit, reading and writing nothing (certgen''s addition). Give it to `certgen check --config`, the exporter or the metrics to monitor what `create` manages with the same windows')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print what would be done; write nothing')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;patch' {
            [CompletionResult]::new('--secret-name', '--secret-name', [CompletionResultType]::ParameterName, 'Name of the Secret holding the CA (required)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Secret (required)')
            [CompletionResult]::new('--secret-type', '--secret-type', [CompletionResultType]::ParameterName, 'The Secret must be of this type (checked; unset: any type)')
            [CompletionResult]::new('--ca-name', '--ca-name', [CompletionResultType]::ParameterName, 'Key of the CA certificate in the Secret (`ca` is read when this key is absent)')
            [CompletionResult]::new('--webhook-name', '--webhook-name', [CompletionResultType]::ParameterName, 'Name of the ValidatingWebhookConfiguration and MutatingWebhookConfiguration to patch')
            [CompletionResult]::new('--apiservice-name', '--apiservice-name', [CompletionResultType]::ParameterName, 'Name of an APIService to patch')
            [CompletionResult]::new('--patch-validating', '--patch-validating', [CompletionResultType]::ParameterName, 'Patch the ValidatingWebhookConfiguration (`--patch-validating=false`: leave it alone)')
            [CompletionResult]::new('--patch-mutating', '--patch-mutating', [CompletionResultType]::ParameterName, 'Patch the MutatingWebhookConfiguration (`--patch-mutating=false`: leave it alone)')
            [CompletionResult]::new('--patch-failure-policy', '--patch-failure-policy', [CompletionResultType]::ParameterName, 'Also set every webhook''s failurePolicy: Ignore or Fail')
            [CompletionResult]::new('--patch-mode', '--patch-mode', [CompletionResultType]::ParameterName, 'How webhook configurations are written: update (read, then a full update fenced by resourceVersion) or patch (server-side apply of the caBundle fields)')
            [CompletionResult]::new('--propagation-delay', '--propagation-delay', [CompletionResultType]::ParameterName, 'How long a webhook may take to serve a replaced Secret''s certificate: until then the caBundle keeps the prior CA beside the Secret''s (certgen''s addition) [default: 2m]')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]')
            [CompletionResult]::new('--log-level', '--log-level', [CompletionResultType]::ParameterName, 'Log level on standard error (kube-webhook-certgen''s spelling; -v and -q work too)')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('--dry-run', '--dry-run', [CompletionResultType]::ParameterName, 'Print what would be done; write nothing')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;handover' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('cert-manager', 'cert-manager', [CompletionResultType]::ParameterValue, 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'certgen;handover;cert-manager' {
            [CompletionResult]::new('--profile', '--profile', [CompletionResultType]::ParameterName, 'Built-in profile to use [default: envoy-gateway]')
            [CompletionResult]::new('--config', '--config', [CompletionResultType]::ParameterName, 'YAML config file (start from `certgen profile show`)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]')
            [CompletionResult]::new('--cluster-domain', '--cluster-domain', [CompletionResultType]::ParameterName, 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]')
            [CompletionResult]::new('--cluster-name', '--cluster-name', [CompletionResultType]::ParameterName, 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]')
            [CompletionResult]::new('--renewal-window', '--renewal-window', [CompletionResultType]::ParameterName, 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows')
            [CompletionResult]::new('--renewal-window-margin', '--renewal-window-margin', [CompletionResultType]::ParameterName, 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]')
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]')
            [CompletionResult]::new('--local', '--local', [CompletionResultType]::ParameterName, 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]')
            [CompletionResult]::new('--config-home', '--config-home', [CompletionResultType]::ParameterName, 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local')
            [CompletionResult]::new('--topology-injector', '--topology-injector', [CompletionResultType]::ParameterName, 'The topology injector''s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace, and says which it used')
            [CompletionResult]::new('--cluster-trust-bundle', '--cluster-trust-bundle', [CompletionResultType]::ParameterName, 'Also publish the first TLS Secret''s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config''s `clusterTrustBundles:` sets labels and the Secret')
            [CompletionResult]::new('--output', '--output', [CompletionResultType]::ParameterName, 'Format of the report on standard output (prometheus: metrics in Prometheus'' text format)')
            [CompletionResult]::new('--kubeconfig', '--kubeconfig', [CompletionResultType]::ParameterName, 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]')
            [CompletionResult]::new('--context', '--context', [CompletionResultType]::ParameterName, 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Bound on waiting for cert-manager with --apply')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('--disable-topology-injector', '--disable-topology-injector', [CompletionResultType]::ParameterName, 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step')
            [CompletionResult]::new('--apply', '--apply', [CompletionResultType]::ParameterName, 'Create the objects and wait for cert-manager, instead of printing them')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;handover;help' {
            [CompletionResult]::new('cert-manager', 'cert-manager', [CompletionResultType]::ParameterValue, 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'certgen;handover;help;cert-manager' {
            break
        }
        'certgen;handover;help;help' {
            break
        }
        'certgen;completions' {
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;man' {
            [CompletionResult]::new('--dir', '--dir', [CompletionResultType]::ParameterName, 'Write every man page into DIR instead: certgen.1 and one per subcommand (certgen-check.1, certgen-profile-show.1, ...), e.g. `--dir /usr/share/man/man1`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Log format on standard error')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More log output (-v debug, -vv trace of certgen''s own decisions)')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Only warnings and errors on standard error')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            break
        }
        'certgen;help' {
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Report expiry, trust and consistency of every Secret; exit 1 when action is due')
            [CompletionResult]::new('profile', 'profile', [CompletionResultType]::ParameterValue, 'Built-in profiles')
            [CompletionResult]::new('exporter', 'exporter', [CompletionResultType]::ParameterValue, 'Serve the metrics of `check --output prometheus` on /metrics, from watches')
            [CompletionResult]::new('create', 'create', [CompletionResultType]::ParameterValue, 'kube-webhook-certgen''s `create`: a CA and a serving certificate in a new Secret')
            [CompletionResult]::new('patch', 'patch', [CompletionResultType]::ParameterValue, 'kube-webhook-certgen''s `patch`: the Secret''s CA into webhook configurations'' caBundle')
            [CompletionResult]::new('handover', 'handover', [CompletionResultType]::ParameterValue, 'Hand certgen''s Secrets over to cert-manager with no TLS gap')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print shell completions')
            [CompletionResult]::new('man', 'man', [CompletionResultType]::ParameterValue, 'Print the man page certgen(1) (roff), or write every page with --dir')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'certgen;help;check' {
            break
        }
        'certgen;help;profile' {
            [CompletionResult]::new('show', 'show', [CompletionResultType]::ParameterValue, 'Print a built-in profile as YAML, a starting point for --config')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the built-in profiles, one line each: its name and whose Secrets it writes')
            break
        }
        'certgen;help;profile;show' {
            break
        }
        'certgen;help;profile;list' {
            break
        }
        'certgen;help;exporter' {
            break
        }
        'certgen;help;create' {
            break
        }
        'certgen;help;patch' {
            break
        }
        'certgen;help;handover' {
            [CompletionResult]::new('cert-manager', 'cert-manager', [CompletionResultType]::ParameterValue, 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply')
            break
        }
        'certgen;help;handover;cert-manager' {
            break
        }
        'certgen;help;completions' {
            break
        }
        'certgen;help;man' {
            break
        }
        'certgen;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
