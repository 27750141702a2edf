
use builtin;
use str;

set edit:completion:arg-completer[certgen] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'certgen'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'certgen'= {
            cand --profile 'Built-in profile to use [default: envoy-gateway]'
            cand --config 'YAML config file (start from `certgen profile show`)'
            cand -n 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --namespace 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --cluster-domain 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]'
            cand --cluster-name 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]'
            cand --renewal-window 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows'
            cand --renewal-window-margin 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]'
            cand -l 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --local 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --config-home 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local'
            cand --topology-injector 'The topology injector''s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace, and says which it used'
            cand --cluster-trust-bundle 'Also publish the first TLS Secret''s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config''s `clusterTrustBundles:` sets labels and the Secret'
            cand --output 'Format of the report on standard output (prometheus: metrics in Prometheus'' text format)'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --context 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)'
            cand --add-member 'With several --context: this context''s cluster joins the set (it enters through a trust step). Repeatable'
            cand --remove-member 'With several --context: take this member (its kube-system UID, or its context) out of the set. Repeatable'
            cand --strategy 'How a rotation reaches consumers: staged (trust first, then leaves) or immediate (one write)'
            cand --propagation-delay 'How long hot-reloading consumers get to load a change before the next rotation phase relies on it [default: 2m in a cluster, 0s with --local]'
            cand --poke-rate 'At most N of a gate''s requests (pod pokes, node Lease reads) started per second, evenly paced, 8 in flight per 100 [default: 100]. Raise it to rotate thousands of pods faster where the control plane has room; see docs/api-requests.md'
            cand --timeout 'Bound on all waiting and probing (e.g. 90s, 5m)'
            cand --metrics-file 'Also write the run''s metrics (what `check --output prometheus` shows after the run, plus its outcome, duration, writes and API requests) to FILE for node-exporter''s textfile collector, replacing it atomically'
            cand --stuck-after 'With --events: how long past its gate (the propagation delay after the phase began) a rotation may stay in one phase before a RotationStuck Warning'
            cand --pushgateway 'Also push the run''s metrics to this Pushgateway (base URL, e.g. `http://pushgateway.monitoring:9091`), replacing the group job=certgen, namespace, profile'
            cand --log-format 'Log format on standard error'
            cand --disable-topology-injector 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
            cand -o 'Rotate now: a new CA, bundled with at most one prior CA, and new leaves'
            cand --overwrite 'Rotate now: a new CA, bundled with at most one prior CA, and new leaves'
            cand --respect-window 'With --overwrite: wait for a renewal window too (by default a rotation asked for by hand starts at once, windows or not)'
            cand --rotate-hmac 'Also replace HMAC Secrets (they are left alone otherwise)'
            cand --force 'Take over Secrets owned by another manager and replace unusable contents'
            cand --wait 'Wait for the rollouts of restarted workloads (Deployments, StatefulSets, DaemonSets) before exiting (and for a cleanup gate that only --propagation-delay can open)'
            cand --no-poke 'Never annotate the pods that mount a changed Secret (which makes their kubelet load it at once and lets gates open on that evidence): every gate waits out --propagation-delay'
            cand --probe 'Verify over TLS that probed consumers serve the new certificates before exiting'
            cand --dry-run 'Print the plan; generate and write nothing'
            cand --events 'Record Kubernetes Events (events.k8s.io/v1) on the Secrets, restarted workloads and caBundle targets: each write and restart, and a Warning for a certificate past its renewal time, an expired CA, or a rotation stuck past its gate. Needs create, get and patch on events (in `default` too for the Events of webhook configurations and APIServices, which are cluster-scoped); a refusal is a warning, never a failed run'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand check 'Report expiry, trust and consistency of every Secret; exit 1 when action is due'
            cand profile 'Built-in profiles'
            cand exporter 'Serve the metrics of `check --output prometheus` on /metrics, from watches'
            cand create 'kube-webhook-certgen''s `create`: a CA and a serving certificate in a new Secret'
            cand patch 'kube-webhook-certgen''s `patch`: the Secret''s CA into webhook configurations'' caBundle'
            cand handover 'Hand certgen''s Secrets over to cert-manager with no TLS gap'
            cand completions 'Print shell completions'
            cand man 'Print the man page certgen(1) (roff), or write every page with --dir'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;check'= {
            cand --profile 'Built-in profile to use [default: envoy-gateway]'
            cand --config 'YAML config file (start from `certgen profile show`)'
            cand -n 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --namespace 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --cluster-domain 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]'
            cand --cluster-name 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]'
            cand --renewal-window 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows'
            cand --renewal-window-margin 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]'
            cand -l 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --local 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --config-home 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local'
            cand --topology-injector 'The topology injector''s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace, and says which it used'
            cand --cluster-trust-bundle 'Also publish the first TLS Secret''s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config''s `clusterTrustBundles:` sets labels and the Secret'
            cand --output 'Format of the report on standard output (prometheus: metrics in Prometheus'' text format)'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --context 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)'
            cand --log-format 'Log format on standard error'
            cand --disable-topology-injector 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;profile'= {
            cand --log-format 'Log format on standard error'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand show 'Print a built-in profile as YAML, a starting point for --config'
            cand list 'List the built-in profiles, one line each: its name and whose Secrets it writes'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;profile;show'= {
            cand --log-format 'Log format on standard error'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;profile;list'= {
            cand --log-format 'Log format on standard error'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;profile;help'= {
            cand show 'Print a built-in profile as YAML, a starting point for --config'
            cand list 'List the built-in profiles, one line each: its name and whose Secrets it writes'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;profile;help;show'= {
        }
        &'certgen;profile;help;list'= {
        }
        &'certgen;profile;help;help'= {
        }
        &'certgen;exporter'= {
            cand --profile 'Built-in profile to use [default: envoy-gateway]'
            cand --config 'YAML config file (start from `certgen profile show`)'
            cand -n 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --namespace 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --cluster-domain 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]'
            cand --cluster-name 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]'
            cand --renewal-window 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows'
            cand --renewal-window-margin 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]'
            cand --topology-injector 'The topology injector''s MutatingWebhookConfiguration when Kustomize renamed it. Without it, a renamed one is found as a run finds it: the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace (when this identity may list and watch mutatingwebhookconfigurations)'
            cand --cluster-trust-bundle 'Watch the ClusterTrustBundles certgen publishes for SIGNER (as `run --cluster-trust-bundle`). Repeatable'
            cand --listen 'Address to serve /metrics, /healthz and /readyz on'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --context 'Kubeconfig context to use'
            cand --log-format 'Log format on standard error'
            cand --disable-topology-injector 'Do not watch Envoy Gateway''s topology injector webhook (its caBundle metrics)'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;create'= {
            cand --host 'Comma-separated host names and IP addresses the serving certificate is valid for (required)'
            cand --secret-name 'Name of the Secret to create (required)'
            cand --namespace 'Namespace of the Secret (required)'
            cand --secret-type 'Type of the Secret'
            cand --ca-name 'Key of the CA certificate in the Secret'
            cand --cert-name 'Key of the serving certificate in the Secret'
            cand --key-name 'Key of the serving certificate''s private key in the Secret'
            cand --validity 'Validity of the CA and the serving certificate (certgen''s addition) [default: 36500d, kube-webhook-certgen''s 100 years]. With a caBundle target, an existing Secret whose certificates last longer (kube-webhook-certgen''s 100 years) is rotated to certificates of this validity, staged, once'
            cand --renew-before 'Renew the CA and the serving certificate this long before they expire (certgen''s addition) [default: a third of --validity]. An existing Secret that is due is renewed only with a caBundle target (--webhook-name or --apiservice-name), through a staged rotation; without one it is kept, with a warning'
            cand --webhook-name 'The ValidatingWebhookConfiguration and MutatingWebhookConfiguration whose caBundle follows the Secret''s CA through a renewal, as `patch` names them (certgen''s addition)'
            cand --apiservice-name 'An APIService whose caBundle follows the Secret''s CA through a renewal (certgen''s addition)'
            cand --patch-validating 'With --webhook-name: the ValidatingWebhookConfiguration follows (`--patch-validating=false`: leave it alone)'
            cand --patch-mutating 'With --webhook-name: the MutatingWebhookConfiguration follows (`--patch-mutating=false`: leave it alone)'
            cand --ca-secret-name 'The Secret holding certgen''s CA and its key, created when a renewal starts (certgen''s addition) [default: the --secret-name with -ca appended]'
            cand --propagation-delay 'How long the webhook and the API server get to load each step of a renewal before the next relies on it (certgen''s addition) [default: 2m]'
            cand --timeout 'Bound on a renewal''s waiting (certgen''s addition); on timeout the run exits 3 with every step so far safe, and the next `create` resumes [default: 5m]'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --log-level 'Log level on standard error (kube-webhook-certgen''s spelling; -v and -q work too)'
            cand --log-format 'Log format on standard error'
            cand --print-config 'Print, as YAML, the config certgen renews this Secret with (its layout, certgen''s CA Secret, the renewal windows and the caBundle targets above) and exit, reading and writing nothing (certgen''s addition). Give it to `certgen check --config`, the exporter or the metrics to monitor what `create` manages with the same windows'
            cand --dry-run 'Print what would be done; write nothing'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;patch'= {
            cand --secret-name 'Name of the Secret holding the CA (required)'
            cand --namespace 'Namespace of the Secret (required)'
            cand --secret-type 'The Secret must be of this type (checked; unset: any type)'
            cand --ca-name 'Key of the CA certificate in the Secret (`ca` is read when this key is absent)'
            cand --webhook-name 'Name of the ValidatingWebhookConfiguration and MutatingWebhookConfiguration to patch'
            cand --apiservice-name 'Name of an APIService to patch'
            cand --patch-validating 'Patch the ValidatingWebhookConfiguration (`--patch-validating=false`: leave it alone)'
            cand --patch-mutating 'Patch the MutatingWebhookConfiguration (`--patch-mutating=false`: leave it alone)'
            cand --patch-failure-policy 'Also set every webhook''s failurePolicy: Ignore or Fail'
            cand --patch-mode 'How webhook configurations are written: update (read, then a full update fenced by resourceVersion) or patch (server-side apply of the caBundle fields)'
            cand --propagation-delay 'How long a webhook may take to serve a replaced Secret''s certificate: until then the caBundle keeps the prior CA beside the Secret''s (certgen''s addition) [default: 2m]'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --log-level 'Log level on standard error (kube-webhook-certgen''s spelling; -v and -q work too)'
            cand --log-format 'Log format on standard error'
            cand --dry-run 'Print what would be done; write nothing'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;handover'= {
            cand --log-format 'Log format on standard error'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
            cand cert-manager 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;handover;cert-manager'= {
            cand --profile 'Built-in profile to use [default: envoy-gateway]'
            cand --config 'YAML config file (start from `certgen profile show`)'
            cand -n 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --namespace 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE for the envoy-gateway config; default: the profile''s]'
            cand --cluster-domain 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]'
            cand --cluster-name 'The cluster''s name, which `{cluster}` in the config''s names and SANs becomes (Cilium''s cluster.name), for a run in one cluster [default: its entry in the config''s clusters:]'
            cand --renewal-window 'A renewal window, `CRON;DURATION[;TZ]` (cert-manager''s cron, windowDuration and timezone, e.g. "0 2 * * 2;4h;Europe/Berlin"): a routine rotation (the CA or a leaf within its renewBefore) starts only inside one, unless it would expire within --renewal-window-margin of the next. Repeatable; replaces the config''s renewal.windows'
            cand --renewal-window-margin 'A routine rotation starts outside the windows when what it renews would expire within this long after the next window opens [default: the config''s renewal.margin, or 24h]'
            cand -l 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --local 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --config-home 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local'
            cand --topology-injector 'The topology injector''s MutatingWebhookConfiguration when it is not named `envoy-gateway-topology-injector.<namespace>` (a Kustomize name prefix or suffix). Without it, a run that does not find that name looks for the one labelled app.kubernetes.io/component=topology-injector whose webhook''s Service is in the namespace, and says which it used'
            cand --cluster-trust-bundle 'Also publish the first TLS Secret''s CA bundle as ClusterTrustBundles linked to SIGNER (`<domain>/<path>`; Kubernetes 1.37+): one bundle per CA, rotated in stages, for pods that project them by signerName and a labelSelector. Repeatable; the config''s `clusterTrustBundles:` sets labels and the Secret'
            cand --output 'Format of the report on standard output (prometheus: metrics in Prometheus'' text format)'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --context 'Kubeconfig context to use. Repeat it for a set of clusters that share one CA: every phase of a rotation is then a barrier over all of them (docs/multicluster.md). With a --config that lists clusters:, leave it out to run over that list (given, the contexts must be the listed ones; one alone runs in that member)'
            cand --timeout 'Bound on waiting for cert-manager with --apply'
            cand --log-format 'Log format on standard error'
            cand --disable-topology-injector 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
            cand --apply 'Create the objects and wait for cert-manager, instead of printing them'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;handover;help'= {
            cand cert-manager 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;handover;help;cert-manager'= {
        }
        &'certgen;handover;help;help'= {
        }
        &'certgen;completions'= {
            cand --log-format 'Log format on standard error'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;man'= {
            cand --dir 'Write every man page into DIR instead: certgen.1 and one per subcommand (certgen-check.1, certgen-profile-show.1, ...), e.g. `--dir /usr/share/man/man1`'
            cand --log-format 'Log format on standard error'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help'
            cand --help 'Print help'
            cand -V 'Print version'
            cand --version 'Print version'
        }
        &'certgen;help'= {
            cand check 'Report expiry, trust and consistency of every Secret; exit 1 when action is due'
            cand profile 'Built-in profiles'
            cand exporter 'Serve the metrics of `check --output prometheus` on /metrics, from watches'
            cand create 'kube-webhook-certgen''s `create`: a CA and a serving certificate in a new Secret'
            cand patch 'kube-webhook-certgen''s `patch`: the Secret''s CA into webhook configurations'' caBundle'
            cand handover 'Hand certgen''s Secrets over to cert-manager with no TLS gap'
            cand completions 'Print shell completions'
            cand man 'Print the man page certgen(1) (roff), or write every page with --dir'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;help;check'= {
        }
        &'certgen;help;profile'= {
            cand show 'Print a built-in profile as YAML, a starting point for --config'
            cand list 'List the built-in profiles, one line each: its name and whose Secrets it writes'
        }
        &'certgen;help;profile;show'= {
        }
        &'certgen;help;profile;list'= {
        }
        &'certgen;help;exporter'= {
        }
        &'certgen;help;create'= {
        }
        &'certgen;help;patch'= {
        }
        &'certgen;help;handover'= {
            cand cert-manager 'Print the cert-manager Issuer and Certificates that continue what certgen wrote, or create them with --apply'
        }
        &'certgen;help;handover;cert-manager'= {
        }
        &'certgen;help;completions'= {
        }
        &'certgen;help;man'= {
        }
        &'certgen;help;help'= {
        }
    ]
    $completions[$command]
}
