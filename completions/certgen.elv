
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
            cand -n 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE; default: the profile''s]'
            cand --namespace 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE; default: the profile''s]'
            cand --cluster-domain 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]'
            cand -l 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --local 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --config-home 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local'
            cand --output 'Format of the report on standard output'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --context 'Kubeconfig context to use'
            cand --strategy 'How a rotation reaches consumers: staged (trust first, then leaves) or immediate (one write)'
            cand --propagation-delay 'How long hot-reloading consumers get to load a change before the next rotation phase relies on it [default: 2m in a cluster, 0s with --local]'
            cand --timeout 'Bound on all waiting and probing (e.g. 90s, 5m)'
            cand --log-format 'Log format on standard error'
            cand --disable-topology-injector 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
            cand -o 'Rotate now: a new CA, bundled with at most one prior CA, and new leaves'
            cand --overwrite 'Rotate now: a new CA, bundled with at most one prior CA, and new leaves'
            cand --rotate-hmac 'Also replace HMAC Secrets (they are left alone otherwise)'
            cand --force 'Take over Secrets owned by another manager and replace unusable contents'
            cand --wait 'Wait for the rollouts of restarted Deployments before exiting (and for a cleanup gate that only --propagation-delay can open)'
            cand --no-poke 'Never annotate the pods that mount a changed Secret (which makes their kubelet load it at once and lets gates open on that evidence): every gate waits out --propagation-delay'
            cand --probe 'Verify over TLS that probed consumers serve the new certificates before exiting'
            cand --dry-run 'Print the plan; generate and write nothing'
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
            cand completions 'Print shell completions'
            cand man 'Print the man page certgen(1) (roff), or write every page with --dir'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;check'= {
            cand --profile 'Built-in profile to use [default: envoy-gateway]'
            cand --config 'YAML config file (start from `certgen profile show`)'
            cand -n 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE; default: the profile''s]'
            cand --namespace 'Namespace of the Secrets [env: CERTGEN_NAMESPACE, then ENVOY_GATEWAY_NAMESPACE; default: the profile''s]'
            cand --cluster-domain 'Cluster DNS domain used in SANs [env: KUBERNETES_CLUSTER_DOMAIN; default: cluster.local]'
            cand -l 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --local 'Files instead of Secrets: `DIR/<secret>/{ca.crt,tls.crt,tls.key}` [default DIR: the config home''s `certs`, `~/.config/envoy-gateway/certs`, as Envoy Gateway v1.6+]'
            cand --config-home 'Envoy Gateway''s config home: `--local` without DIR writes `DIR/certs` [default: ~/.config/envoy-gateway]. Only used with --local'
            cand --output 'Format of the report on standard output'
            cand --kubeconfig 'Kubeconfig file [default: $KUBECONFIG, ~/.kube/config, or in-cluster]'
            cand --context 'Kubeconfig context to use'
            cand --log-format 'Log format on standard error'
            cand --disable-topology-injector 'Leave Envoy Gateway''s topology injector webhook alone: do not keep the caBundle of MutatingWebhookConfiguration `envoy-gateway-topology-injector.<namespace>` in step'
            cand -v 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand --verbose 'More log output (-v debug, -vv trace of certgen''s own decisions)'
            cand -q 'Only warnings and errors on standard error'
            cand --quiet 'Only warnings and errors on standard error'
            cand -h 'Print help'
            cand --help 'Print help'
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
            cand list 'List the built-in profiles'
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
            cand list 'List the built-in profiles'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;profile;help;show'= {
        }
        &'certgen;profile;help;list'= {
        }
        &'certgen;profile;help;help'= {
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
            cand completions 'Print shell completions'
            cand man 'Print the man page certgen(1) (roff), or write every page with --dir'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'certgen;help;check'= {
        }
        &'certgen;help;profile'= {
            cand show 'Print a built-in profile as YAML, a starting point for --config'
            cand list 'List the built-in profiles'
        }
        &'certgen;help;profile;show'= {
        }
        &'certgen;help;profile;list'= {
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
