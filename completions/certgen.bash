_certgen() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="certgen"
                ;;
            certgen,check)
                cmd="certgen__subcmd__check"
                ;;
            certgen,completions)
                cmd="certgen__subcmd__completions"
                ;;
            certgen,create)
                cmd="certgen__subcmd__create"
                ;;
            certgen,exporter)
                cmd="certgen__subcmd__exporter"
                ;;
            certgen,handover)
                cmd="certgen__subcmd__handover"
                ;;
            certgen,help)
                cmd="certgen__subcmd__help"
                ;;
            certgen,man)
                cmd="certgen__subcmd__man"
                ;;
            certgen,patch)
                cmd="certgen__subcmd__patch"
                ;;
            certgen,profile)
                cmd="certgen__subcmd__profile"
                ;;
            certgen__subcmd__handover,cert-manager)
                cmd="certgen__subcmd__handover__subcmd__cert__subcmd__manager"
                ;;
            certgen__subcmd__handover,help)
                cmd="certgen__subcmd__handover__subcmd__help"
                ;;
            certgen__subcmd__handover__subcmd__help,cert-manager)
                cmd="certgen__subcmd__handover__subcmd__help__subcmd__cert__subcmd__manager"
                ;;
            certgen__subcmd__handover__subcmd__help,help)
                cmd="certgen__subcmd__handover__subcmd__help__subcmd__help"
                ;;
            certgen__subcmd__help,check)
                cmd="certgen__subcmd__help__subcmd__check"
                ;;
            certgen__subcmd__help,completions)
                cmd="certgen__subcmd__help__subcmd__completions"
                ;;
            certgen__subcmd__help,create)
                cmd="certgen__subcmd__help__subcmd__create"
                ;;
            certgen__subcmd__help,exporter)
                cmd="certgen__subcmd__help__subcmd__exporter"
                ;;
            certgen__subcmd__help,handover)
                cmd="certgen__subcmd__help__subcmd__handover"
                ;;
            certgen__subcmd__help,help)
                cmd="certgen__subcmd__help__subcmd__help"
                ;;
            certgen__subcmd__help,man)
                cmd="certgen__subcmd__help__subcmd__man"
                ;;
            certgen__subcmd__help,patch)
                cmd="certgen__subcmd__help__subcmd__patch"
                ;;
            certgen__subcmd__help,profile)
                cmd="certgen__subcmd__help__subcmd__profile"
                ;;
            certgen__subcmd__help__subcmd__handover,cert-manager)
                cmd="certgen__subcmd__help__subcmd__handover__subcmd__cert__subcmd__manager"
                ;;
            certgen__subcmd__help__subcmd__profile,list)
                cmd="certgen__subcmd__help__subcmd__profile__subcmd__list"
                ;;
            certgen__subcmd__help__subcmd__profile,show)
                cmd="certgen__subcmd__help__subcmd__profile__subcmd__show"
                ;;
            certgen__subcmd__profile,help)
                cmd="certgen__subcmd__profile__subcmd__help"
                ;;
            certgen__subcmd__profile,list)
                cmd="certgen__subcmd__profile__subcmd__list"
                ;;
            certgen__subcmd__profile,show)
                cmd="certgen__subcmd__profile__subcmd__show"
                ;;
            certgen__subcmd__profile__subcmd__help,help)
                cmd="certgen__subcmd__profile__subcmd__help__subcmd__help"
                ;;
            certgen__subcmd__profile__subcmd__help,list)
                cmd="certgen__subcmd__profile__subcmd__help__subcmd__list"
                ;;
            certgen__subcmd__profile__subcmd__help,show)
                cmd="certgen__subcmd__profile__subcmd__help__subcmd__show"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        certgen)
            opts="-n -l -o -v -q -h -V --profile --config --namespace --cluster-domain --cluster-name --renewal-window --renewal-window-margin --local --config-home --disable-topology-injector --topology-injector --cluster-trust-bundle --output --kubeconfig --context --overwrite --respect-window --rotate-hmac --force --add-member --remove-member --strategy --propagation-delay --wait --no-poke --poke-rate --probe --timeout --dry-run --metrics-file --events --stuck-after --pushgateway --log-format --verbose --quiet --help --version check profile exporter create patch handover completions man help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --namespace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -n)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-domain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window-margin)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --local)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -l)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config-home)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --topology-injector)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-trust-bundle)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json prometheus" -- "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --context)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --add-member)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --remove-member)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --strategy)
                    COMPREPLY=($(compgen -W "staged immediate" -- "${cur}"))
                    return 0
                    ;;
                --propagation-delay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --poke-rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stuck-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pushgateway)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__check)
            opts="-n -l -v -q -h -V --profile --config --namespace --cluster-domain --cluster-name --renewal-window --renewal-window-margin --local --config-home --disable-topology-injector --topology-injector --cluster-trust-bundle --output --kubeconfig --context --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --namespace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -n)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-domain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window-margin)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --local)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -l)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config-home)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --topology-injector)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-trust-bundle)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json prometheus" -- "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --context)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__completions)
            opts="-v -q -h -V --log-format --verbose --quiet --help --version bash elvish fish powershell zsh"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__create)
            opts="-v -q -h -V --host --secret-name --namespace --secret-type --ca-name --cert-name --key-name --validity --renew-before --webhook-name --apiservice-name --patch-validating --patch-mutating --ca-secret-name --propagation-delay --timeout --print-config --kubeconfig --log-level --dry-run --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --secret-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --namespace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --secret-type)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ca-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cert-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --key-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --validity)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renew-before)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --webhook-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --apiservice-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --patch-validating)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --patch-mutating)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ca-secret-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --propagation-delay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-level)
                    COMPREPLY=($(compgen -W "trace debug info warn error fatal panic" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__exporter)
            opts="-n -v -q -h -V --profile --config --namespace --cluster-domain --cluster-name --renewal-window --renewal-window-margin --disable-topology-injector --topology-injector --cluster-trust-bundle --listen --kubeconfig --context --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --namespace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -n)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-domain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window-margin)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --topology-injector)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-trust-bundle)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --context)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__handover)
            opts="-v -q -h -V --log-format --verbose --quiet --help --version cert-manager help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__handover__subcmd__cert__subcmd__manager)
            opts="-n -l -v -q -h -V --profile --config --namespace --cluster-domain --cluster-name --renewal-window --renewal-window-margin --local --config-home --disable-topology-injector --topology-injector --cluster-trust-bundle --output --kubeconfig --context --apply --timeout --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --namespace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -n)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-domain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --renewal-window-margin)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --local)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -l)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --config-home)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --topology-injector)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-trust-bundle)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --output)
                    COMPREPLY=($(compgen -W "text json prometheus" -- "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --context)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__handover__subcmd__help)
            opts="cert-manager help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__handover__subcmd__help__subcmd__cert__subcmd__manager)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__handover__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help)
            opts="check profile exporter create patch handover completions man help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__check)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__completions)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__create)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__exporter)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__handover)
            opts="cert-manager"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__handover__subcmd__cert__subcmd__manager)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__man)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__patch)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__profile)
            opts="show list"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__profile__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__help__subcmd__profile__subcmd__show)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__man)
            opts="-v -q -h -V --dir --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__patch)
            opts="-v -q -h -V --secret-name --namespace --secret-type --ca-name --webhook-name --apiservice-name --patch-validating --patch-mutating --patch-failure-policy --patch-mode --propagation-delay --kubeconfig --log-level --dry-run --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --secret-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --namespace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --secret-type)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ca-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --webhook-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --apiservice-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --patch-validating)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --patch-mutating)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --patch-failure-policy)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --patch-mode)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --propagation-delay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kubeconfig)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-level)
                    COMPREPLY=($(compgen -W "trace debug info warn error fatal panic" -- "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__profile)
            opts="-v -q -h -V --log-format --verbose --quiet --help --version show list help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__profile__subcmd__help)
            opts="show list help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__profile__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__profile__subcmd__help__subcmd__list)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__profile__subcmd__help__subcmd__show)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__profile__subcmd__list)
            opts="-v -q -h -V --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        certgen__subcmd__profile__subcmd__show)
            opts="-v -q -h -V --log-format --verbose --quiet --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-format)
                    COMPREPLY=($(compgen -W "text json" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _certgen -o nosort -o bashdefault -o default certgen
else
    complete -F _certgen -o bashdefault -o default certgen
fi
