# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_certgen_global_optspecs
    string join \n profile= config= n/namespace= cluster-domain= cluster-name= renewal-window= renewal-window-margin= l/local= config-home= disable-topology-injector topology-injector= cluster-trust-bundle= output= kubeconfig= context= o/overwrite respect-window rotate-hmac force add-member= remove-member= strategy= propagation-delay= wait no-poke poke-rate= probe timeout= dry-run metrics-file= events stuck-after= pushgateway= log-format= v/verbose q/quiet h/help V/version
end

function __fish_certgen_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_certgen_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_certgen_using_subcommand
    set -l cmd (__fish_certgen_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c certgen -n "__fish_certgen_needs_command" -l profile -d 'Built-in profile to use [default: envoy-gateway]' -r
complete -c certgen -n "__fish_certgen_needs_command" -l config -d 'YAML config file (start from `certgen profile show`)' -r -F
complete -c certgen -n "__fish_certgen_needs_command" -s n -l namespace -d 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile\'s]' -r
complete -c certgen -n "__fish_certgen_needs_command" -l cluster-domain -d 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]' -r
complete -c certgen -n "__fish_certgen_needs_command" -l cluster-name -d 'The cluster\'s name, which `{cluster}` in the config\'s names and SANs becomes (Cilium\'s cluster.name), for a run in one cluster [default: its entry in the config\'s clusters:]' -r
complete -c certgen -n "__fish_certgen_needs_command" -l renewal-window -d 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager\'s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config\'s renewal.windows' -r
complete -c certgen -n "__fish_certgen_needs_command" -l renewal-window-margin -d 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config\'s renewal.margin, or 24h]' -r
complete -c certgen -n "__fish_certgen_needs_command" -s l -l local -d 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home\'s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]' -r -F
complete -c certgen -n "__fish_certgen_needs_command" -l config-home -d 'Envoy Gateway\'s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local' -r -F
complete -c certgen -n "__fish_certgen_needs_command" -l topology-injector -d 'The topology injector\'s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook\'s Service is in the namespace, and says which it used' -r
complete -c certgen -n "__fish_certgen_needs_command" -l cluster-trust-bundle -d 'Also publish the first TLS Secret\'s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config\'s `clusterTrustBundles:` sets labels and the Secret' -r
complete -c certgen -n "__fish_certgen_needs_command" -l output -d 'Format of the report on standard output (prometheus: metrics in Prometheus\' text format)' -r -f -a "text\t''
json\t''
prometheus\t''"
complete -c certgen -n "__fish_certgen_needs_command" -l kubeconfig -d 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]' -r -F
complete -c certgen -n "__fish_certgen_needs_command" -l context -d 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)' -r
complete -c certgen -n "__fish_certgen_needs_command" -l add-member -d 'With several --context: this context\'s cluster joins the set (it enters through a trust step). Repeatable' -r
complete -c certgen -n "__fish_certgen_needs_command" -l remove-member -d 'With several --context: take this member (its kube-system UID, or its context) out of the set. Repeatable' -r
complete -c certgen -n "__fish_certgen_needs_command" -l strategy -d 'How a rotation reaches consumers: staged (trust first, then leaves) or immediate (one write)' -r -f -a "staged\t'Trust first: every bundle gets the new CA beside the current one; leaves follow once consumers have it'
immediate\t'Bundle and leaves in one write, for setups where every consumer restarts'"
complete -c certgen -n "__fish_certgen_needs_command" -l propagation-delay -d 'How long hot-reloading consumers get to load a change before the next rotation phase relies on it [default: 2m in a cluster, 0s with --local]' -r
complete -c certgen -n "__fish_certgen_needs_command" -l poke-rate -d 'At most N of a gate\'s requests (pod pokes, node Lease reads) started per second, evenly paced, 8 in flight per 100 [default: 100]. Raise it to rotate thousands of pods faster where the control plane has room; see docs/api-requests.md' -r
complete -c certgen -n "__fish_certgen_needs_command" -l timeout -d 'Bound on all waiting and probing (e.g. 90s, 5m)' -r
complete -c certgen -n "__fish_certgen_needs_command" -l metrics-file -d 'Also write the run\'s metrics (what `check --output prometheus` shows after the run, plus its outcome, duration, writes and API requests) to FILE for node-exporter\'s textfile collector, replacing it atomically' -r -F
complete -c certgen -n "__fish_certgen_needs_command" -l stuck-after -d 'With --events: how long past its gate (the propagation delay after the phase began) a rotation may stay in one phase before a RotationStuck Warning' -r
complete -c certgen -n "__fish_certgen_needs_command" -l pushgateway -d 'Also push the run\'s metrics to this Pushgateway (base URL, e.g. `http://pushgateway.monitoring:9091`), replacing the group job=certgen, namespace, profile' -r
complete -c certgen -n "__fish_certgen_needs_command" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_needs_command" -l disable-topology-injector -d 'Leave Envoy Gateway\'s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
complete -c certgen -n "__fish_certgen_needs_command" -s o -l overwrite -d 'Rotate now: a new CA, bundled with at most one prior CA, and new leaves'
complete -c certgen -n "__fish_certgen_needs_command" -l respect-window -d 'With --overwrite: wait for a renewal window too (by default a rotation asked for by hand starts at once, windows or not)'
complete -c certgen -n "__fish_certgen_needs_command" -l rotate-hmac -d 'Also replace HMAC Secrets (they are left alone otherwise)'
complete -c certgen -n "__fish_certgen_needs_command" -l force -d 'Take over Secrets owned by another manager and replace unusable contents'
complete -c certgen -n "__fish_certgen_needs_command" -l wait -d 'Wait for the rollouts of restarted workloads (Deployments, StatefulSets, DaemonSets) before exiting (and for a cleanup gate that only --propagation-delay can open)'
complete -c certgen -n "__fish_certgen_needs_command" -l no-poke -d 'Never annotate the pods that mount a changed Secret (which makes their kubelet load it at once and lets gates open on that evidence): every gate waits out --propagation-delay'
complete -c certgen -n "__fish_certgen_needs_command" -l probe -d 'Verify over TLS that probed consumers serve the new certificates before exiting'
complete -c certgen -n "__fish_certgen_needs_command" -l dry-run -d 'Print the plan; generate and write nothing'
complete -c certgen -n "__fish_certgen_needs_command" -l events -d 'Record Kubernetes Events (events.k8s.io/v1) on the Secrets, restarted workloads and caBundle targets: each write and restart, and a Warning for a certificate past its renewal time, an expired CA, or a rotation stuck past its gate. Needs create, get and patch on events (in `default` too for the Events of webhook configurations and APIServices, which are cluster-scoped); a refusal is a warning, never a failed run'
complete -c certgen -n "__fish_certgen_needs_command" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_needs_command" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c certgen -n "__fish_certgen_needs_command" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "check" -d 'Report expiry, trust and consistency of every Secret; exit 1 when action is due'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "profile" -d 'Built-in profiles'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "exporter" -d 'Serve the metrics of `check --output prometheus` on /metrics, from watches'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "create" -d 'kube-webhook-certgen\'s `create`: a CA and a serving certificate in a new Secret'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "patch" -d 'kube-webhook-certgen\'s `patch`: the Secret\'s CA into webhook configurations\' caBundle'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "handover" -d 'Hand certgen\'s Secrets over to cert-manager with no TLS gap'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "completions" -d 'Print shell completions'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "man" -d 'Print the man page certgen(1) (roff), or write every page with --dir'
complete -c certgen -n "__fish_certgen_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c certgen -n "__fish_certgen_using_subcommand check" -l profile -d 'Built-in profile to use [default: envoy-gateway]' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l config -d 'YAML config file (start from `certgen profile show`)' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand check" -s n -l namespace -d 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile\'s]' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l cluster-domain -d 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l cluster-name -d 'The cluster\'s name, which `{cluster}` in the config\'s names and SANs becomes (Cilium\'s cluster.name), for a run in one cluster [default: its entry in the config\'s clusters:]' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l renewal-window -d 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager\'s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config\'s renewal.windows' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l renewal-window-margin -d 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config\'s renewal.margin, or 24h]' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -s l -l local -d 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home\'s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand check" -l config-home -d 'Envoy Gateway\'s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand check" -l topology-injector -d 'The topology injector\'s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook\'s Service is in the namespace, and says which it used' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l cluster-trust-bundle -d 'Also publish the first TLS Secret\'s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config\'s `clusterTrustBundles:` sets labels and the Secret' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l output -d 'Format of the report on standard output (prometheus: metrics in Prometheus\' text format)' -r -f -a "text\t''
json\t''
prometheus\t''"
complete -c certgen -n "__fish_certgen_using_subcommand check" -l kubeconfig -d 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand check" -l context -d 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)' -r
complete -c certgen -n "__fish_certgen_using_subcommand check" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand check" -l disable-topology-injector -d 'Leave Envoy Gateway\'s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
complete -c certgen -n "__fish_certgen_using_subcommand check" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand check" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c certgen -n "__fish_certgen_using_subcommand check" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -s h -l help -d 'Print help'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -f -a "show" -d 'Print a built-in profile as YAML, a starting point for --config'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -f -a "list" -d 'List the built-in profiles, one line each: its name and whose Secrets it writes'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and not __fish_seen_subcommand_from show list help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from show" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from show" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from list" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from list" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "show" -d 'Print a built-in profile as YAML, a starting point for --config'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the built-in profiles, one line each: its name and whose Secrets it writes'
complete -c certgen -n "__fish_certgen_using_subcommand profile; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l profile -d 'Built-in profile to use [default: envoy-gateway]' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l config -d 'YAML config file (start from `certgen profile show`)' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -s n -l namespace -d 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile\'s]' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l cluster-domain -d 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l cluster-name -d 'The cluster\'s name, which `{cluster}` in the config\'s names and SANs becomes (Cilium\'s cluster.name), for a run in one cluster [default: its entry in the config\'s clusters:]' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l renewal-window -d 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager\'s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config\'s renewal.windows' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l renewal-window-margin -d 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config\'s renewal.margin, or 24h]' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l topology-injector -d 'The topology injector\'s MutatingWebhookConfiguration when Kustomize renamed it. Without it, a renamed one is found as a run finds it: the one labelled app.kubernetes.io/component=topology-injector whose webhook\'s Service is in the namespace (when this identity may list and watch mutatingwebhookconfigurations)' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l cluster-trust-bundle -d 'Watch the ClusterTrustBundles certgen publishes for SIGNER (as `run --cluster-trust-bundle`). Repeatable' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l listen -d 'Address to serve /metrics, /healthz and /readyz on' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l kubeconfig -d 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l context -d 'Kubeconfig context to use' -r
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -l disable-topology-injector -d 'Do not watch Envoy Gateway\'s topology injector webhook (its caBundle metrics)'
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c certgen -n "__fish_certgen_using_subcommand exporter" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand create" -l host -d 'Comma-separated host names and IP addresses the serving certificate is valid for (required)' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l secret-name -d 'Name of the Secret to create (required)' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l namespace -d 'Namespace of the Secret (required)' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l secret-type -d 'Type of the Secret' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l ca-name -d 'Key of the CA certificate in the Secret' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l cert-name -d 'Key of the serving certificate in the Secret' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l key-name -d 'Key of the serving certificate\'s private key in the Secret' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l validity -d 'Validity of the CA and the serving certificate (certgen\'s addition) [default: 36500d, kube-webhook-certgen\'s 100 years]. With a caBundle target, an existing Secret whose certificates last longer (kube-webhook-certgen\'s 100 years) is rotated to certificates of this validity, staged, once' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l renew-before -d 'Renew the CA and the serving certificate this long before they expire (certgen\'s addition) [default: a third of --validity]. An existing Secret that is due is renewed only with a caBundle target (--webhook-name or --apiservice-name), through a staged rotation; without one it is kept, with a warning' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l webhook-name -d 'The ValidatingWebhookConfiguration and MutatingWebhookConfiguration whose caBundle follows the Secret\'s CA through a renewal, as `patch` names them (certgen\'s addition)' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l apiservice-name -d 'An APIService whose caBundle follows the Secret\'s CA through a renewal (certgen\'s addition)' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l patch-validating -d 'With --webhook-name: the ValidatingWebhookConfiguration follows (`--patch-validating=false`: leave it alone)' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l patch-mutating -d 'With --webhook-name: the MutatingWebhookConfiguration follows (`--patch-mutating=false`: leave it alone)' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l ca-secret-name -d 'The Secret holding certgen\'s CA and its key, created when a renewal starts (certgen\'s addition) [default: the --secret-name with -ca appended]' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l propagation-delay -d 'How long the webhook and the API server get to load each step of a renewal before the next relies on it (certgen\'s addition) [default: 2m]' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l timeout -d 'Bound on a renewal\'s waiting (certgen\'s addition); on timeout the run exits 3 with every step so far safe, and the next `create` resumes [default: 5m]' -r
complete -c certgen -n "__fish_certgen_using_subcommand create" -l kubeconfig -d 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand create" -l log-level -d 'Log level on standard error (kube-webhook-certgen\'s spelling; -v and -q work too)' -r -f -a "trace\t''
debug\t''
info\t''
warn\t''
error\t''
fatal\t''
panic\t''"
complete -c certgen -n "__fish_certgen_using_subcommand create" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand create" -l print-config -d 'Print, as YAML, the config certgen renews this Secret with (its layout, certgen\'s CA Secret, the renewal windows and the caBundle targets above) and exit, reading and writing nothing (certgen\'s addition). Give it to `certgen check --config`, the exporter or the metrics to monitor what `create` manages with the same windows'
complete -c certgen -n "__fish_certgen_using_subcommand create" -l dry-run -d 'Print what would be done; write nothing'
complete -c certgen -n "__fish_certgen_using_subcommand create" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand create" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand create" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c certgen -n "__fish_certgen_using_subcommand create" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l secret-name -d 'Name of the Secret holding the CA (required)' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l namespace -d 'Namespace of the Secret (required)' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l secret-type -d 'The Secret must be of this type (checked; unset: any type)' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l ca-name -d 'Key of the CA certificate in the Secret (`ca` is read when this key is absent)' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l webhook-name -d 'Name of the ValidatingWebhookConfiguration and MutatingWebhookConfiguration to patch' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l apiservice-name -d 'Name of an APIService to patch' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l patch-validating -d 'Patch the ValidatingWebhookConfiguration (`--patch-validating=false`: leave it alone)' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l patch-mutating -d 'Patch the MutatingWebhookConfiguration (`--patch-mutating=false`: leave it alone)' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l patch-failure-policy -d 'Also set every webhook\'s failurePolicy: Ignore or Fail' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l patch-mode -d 'How webhook configurations are written: update (read, then a full update fenced by resourceVersion) or patch (server-side apply of the caBundle fields)' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l propagation-delay -d 'How long a webhook may take to serve a replaced Secret\'s certificate: until then the caBundle keeps the prior CA beside the Secret\'s (certgen\'s addition) [default: 2m]' -r
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l kubeconfig -d 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l log-level -d 'Log level on standard error (kube-webhook-certgen\'s spelling; -v and -q work too)' -r -f -a "trace\t''
debug\t''
info\t''
warn\t''
error\t''
fatal\t''
panic\t''"
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand patch" -l dry-run -d 'Print what would be done; write nothing'
complete -c certgen -n "__fish_certgen_using_subcommand patch" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand patch" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand patch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c certgen -n "__fish_certgen_using_subcommand patch" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and not __fish_seen_subcommand_from cert-manager help" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand handover; and not __fish_seen_subcommand_from cert-manager help" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and not __fish_seen_subcommand_from cert-manager help" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and not __fish_seen_subcommand_from cert-manager help" -s h -l help -d 'Print help'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and not __fish_seen_subcommand_from cert-manager help" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and not __fish_seen_subcommand_from cert-manager help" -f -a "cert-manager" -d 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and not __fish_seen_subcommand_from cert-manager help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l profile -d 'Built-in profile to use [default: envoy-gateway]' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l config -d 'YAML config file (start from `certgen profile show`)' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -s n -l namespace -d 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile\'s]' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l cluster-domain -d 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l cluster-name -d 'The cluster\'s name, which `{cluster}` in the config\'s names and SANs becomes (Cilium\'s cluster.name), for a run in one cluster [default: its entry in the config\'s clusters:]' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l renewal-window -d 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager\'s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config\'s renewal.windows' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l renewal-window-margin -d 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config\'s renewal.margin, or 24h]' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -s l -l local -d 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home\'s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l config-home -d 'Envoy Gateway\'s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l topology-injector -d 'The topology injector\'s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook\'s Service is in the namespace, and says which it used' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l cluster-trust-bundle -d 'Also publish the first TLS Secret\'s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config\'s `clusterTrustBundles:` sets labels and the Secret' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l output -d 'Format of the report on standard output (prometheus: metrics in Prometheus\' text format)' -r -f -a "text\t''
json\t''
prometheus\t''"
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l kubeconfig -d 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l context -d 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l timeout -d 'Bound on waiting for cert-manager with --apply' -r
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l disable-topology-injector -d 'Leave Envoy Gateway\'s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -l apply -d 'Create the objects and wait for cert-manager, instead of printing them'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from cert-manager" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from help" -f -a "cert-manager" -d 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply'
complete -c certgen -n "__fish_certgen_using_subcommand handover; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c certgen -n "__fish_certgen_using_subcommand completions" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand completions" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand completions" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand completions" -s h -l help -d 'Print help'
complete -c certgen -n "__fish_certgen_using_subcommand completions" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand man" -l dir -d 'Write every man page into DIR instead: certgen.1 and one per subcommand (certgen-check.1, certgen-profile-show.1, ...), e.g. `--dir /usr/share/man/man1`' -r -F
complete -c certgen -n "__fish_certgen_using_subcommand man" -l log-format -d 'Log format on standard error' -r -f -a "text\t''
json\t''"
complete -c certgen -n "__fish_certgen_using_subcommand man" -s v -l verbose -d 'More log output (-v debug, -vv trace of certgen\'s own decisions)'
complete -c certgen -n "__fish_certgen_using_subcommand man" -s q -l quiet -d 'Only warnings and errors on standard error'
complete -c certgen -n "__fish_certgen_using_subcommand man" -s h -l help -d 'Print help'
complete -c certgen -n "__fish_certgen_using_subcommand man" -s V -l version -d 'Print version'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "check" -d 'Report expiry, trust and consistency of every Secret; exit 1 when action is due'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "profile" -d 'Built-in profiles'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "exporter" -d 'Serve the metrics of `check --output prometheus` on /metrics, from watches'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "create" -d 'kube-webhook-certgen\'s `create`: a CA and a serving certificate in a new Secret'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "patch" -d 'kube-webhook-certgen\'s `patch`: the Secret\'s CA into webhook configurations\' caBundle'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "handover" -d 'Hand certgen\'s Secrets over to cert-manager with no TLS gap'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "completions" -d 'Print shell completions'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "man" -d 'Print the man page certgen(1) (roff), or write every page with --dir'
complete -c certgen -n "__fish_certgen_using_subcommand help; and not __fish_seen_subcommand_from check profile exporter create patch handover completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c certgen -n "__fish_certgen_using_subcommand help; and __fish_seen_subcommand_from profile" -f -a "show" -d 'Print a built-in profile as YAML, a starting point for --config'
complete -c certgen -n "__fish_certgen_using_subcommand help; and __fish_seen_subcommand_from profile" -f -a "list" -d 'List the built-in profiles, one line each: its name and whose Secrets it writes'
complete -c certgen -n "__fish_certgen_using_subcommand help; and __fish_seen_subcommand_from handover" -f -a "cert-manager" -d 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply'
