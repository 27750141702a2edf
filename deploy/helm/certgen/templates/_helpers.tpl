{{/* The release's full name: the release name, with "-certgen" unless it already says so. */}}
{{- define "certgen.fullname" -}}
{{- if contains "certgen" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-certgen" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "certgen.selectorLabels" -}}
app.kubernetes.io/name: certgen
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "certgen.labels" -}}
{{ include "certgen.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Namespace of the Secrets (and of the Role and RoleBinding). */}}
{{- define "certgen.targetNamespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{- define "certgen.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "certgen.fullname" .) -}}
{{- end -}}

{{/*
Who runs certgen, each with an identity of its own (ServiceAccount, Roles, bindings, ConfigMap):
- "hook": the pre-install/pre-upgrade hook Job. Its objects are Helm hooks, created before it
  (lower weights) and deleted by Helm once the hook has run (hook-succeeded, which Helm also
  applies to the hooks that succeeded before a failed one), so nothing of it outlives the hook
  but the Job itself, kept for its logs.
- "release": the CronJob (and the exporter's config). Ordinary release objects, which
  `helm uninstall` deletes.
A JSON list of the identities the values ask for.
*/}}
{{- define "certgen.identities" -}}
{{- $ids := list -}}
{{- if .Values.job.enabled -}}
{{- $ids = append $ids "hook" -}}
{{- end -}}
{{- if .Values.cronJob.enabled -}}
{{- $ids = append $ids "release" -}}
{{- end -}}
{{- toJson $ids -}}
{{- end -}}

{{/* The name of an identity's object: (dict "base" NAME "identity" "hook"|"release"); the
hook's carry "-hook". */}}
{{- define "certgen.identityName" -}}
{{- if eq .identity "hook" -}}
{{- printf "%s-hook" (.base | trunc 58 | trimSuffix "-") -}}
{{- else -}}
{{- .base | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The Helm hook annotations of an identity's object created at `weight` (none for the
release's): (dict "identity" ID "weight" W). */}}
{{- define "certgen.identityAnnotations" -}}
{{- if eq .identity "hook" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
{{- end -}}

{{/* Whether the release keeps a ConfigMap of the config: for the CronJob or the exporter. */}}
{{- define "certgen.releaseConfigMap" -}}
{{- if and (include "certgen.configText" .) (or .Values.cronJob.enabled .Values.metrics.enabled) -}}
true
{{- end -}}
{{- end -}}

{{/* The config as YAML text, or "" when the built-in profile is used. */}}
{{- define "certgen.configText" -}}
{{- if kindIs "string" .Values.config -}}
{{- .Values.config -}}
{{- else if .Values.config -}}
{{- toYaml .Values.config -}}
{{- end -}}
{{- end -}}

{{/* The config as a map (empty without one); fails on YAML that does not parse. */}}
{{- define "certgen.configMap" -}}
{{- $text := include "certgen.configText" . -}}
{{- if $text -}}
{{- $c := fromYaml $text -}}
{{- if hasKey $c "Error" -}}
{{- fail (printf "config is not valid YAML: %s" $c.Error) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}
{{- end -}}

{{/* The profile name: the config's `name`, else the built-in profile. */}}
{{- define "certgen.profileName" -}}
{{- $c := include "certgen.configMap" . | fromYaml -}}
{{- if include "certgen.configText" . -}}
{{- required "config must have a name (it names the lock Lease <name>-certgen-lock)" $c.name -}}
{{- else -}}
{{- required "profile or config is required" .Values.profile -}}
{{- end -}}
{{- end -}}

{{/* The Secret names certgen may get and patch, as a YAML list. */}}
{{- define "certgen.secretNames" -}}
{{- $names := list -}}
{{- if include "certgen.configText" . -}}
{{- $c := include "certgen.configMap" . | fromYaml -}}
{{- $ca := required "config must have ca.secretName" (($c.ca | default dict).secretName) -}}
{{- $names = append $names $ca -}}
{{- range $s := ($c.secrets | default list) -}}
{{- $names = append $names (required "every config secret must have a name" $s.name) -}}
{{- end -}}
{{- else if .Values.secretNames -}}
{{- $names = .Values.secretNames -}}
{{- else -}}
{{- /* Each built-in profile's CA Secret and Secrets (`certgen profile show NAME`); a chart
       test renders every profile and compares. */ -}}
{{- $builtin := dict
  "envoy-gateway" (list "envoy-gateway-ca" "envoy-gateway" "envoy" "envoy-rate-limit" "envoy-oidc-hmac")
  "cilium-hubble" (list "cilium-hubble-ca" "hubble-server-certs" "hubble-relay-client-certs" "hubble-relay-server-certs" "hubble-metrics-server-certs" "hubble-ui-client-certs")
  "cilium-clustermesh" (list "cilium-ca" "clustermesh-apiserver-server-cert" "clustermesh-apiserver-admin-cert" "clustermesh-apiserver-remote-cert" "clustermesh-apiserver-local-cert" "hubble-server-certs" "hubble-relay-client-certs" "hubble-relay-server-certs" "hubble-metrics-server-certs" "hubble-ui-client-certs")
  "contour" (list "contour-ca" "contourcert" "envoycert") -}}
{{- $names = get $builtin .Values.profile -}}
{{- if not $names -}}
{{- fail (printf "profile %q is not built into this chart: set secretNames to its Secrets, or use config" .Values.profile) -}}
{{- end -}}
{{- end -}}
{{- toYaml (uniq $names) -}}
{{- end -}}

{{/* The apps resources of the consumers' workload kinds, as a flow list: deployments always
(the built-in profiles' consumers), statefulsets and daemonsets when a consumer of the config has
that kind. */}}
{{- define "certgen.workloadResources" -}}
{{- $resources := list "deployments" -}}
{{- if include "certgen.configText" . -}}
{{- $c := include "certgen.configMap" . | fromYaml -}}
{{- range $consumer := ($c.consumers | default list) -}}
{{- $kind := $consumer.kind | default "Deployment" -}}
{{- if eq $kind "StatefulSet" -}}
{{- $resources = append $resources "statefulsets" -}}
{{- else if eq $kind "DaemonSet" -}}
{{- $resources = append $resources "daemonsets" -}}
{{- end -}}
{{- end -}}
{{- end -}}
[{{ join ", " (uniq $resources) }}]
{{- end -}}

{{/*
The signers of the ClusterTrustBundles certgen publishes (a JSON list): the values' and the
config's (`clusterTrustBundles[].signerName`). The values' are passed as --cluster-trust-bundle.
*/}}
{{- define "certgen.trustSigners" -}}
{{- $signers := list -}}
{{- range .Values.clusterTrustBundles -}}
{{- $signers = append $signers . -}}
{{- end -}}
{{- range (get (include "certgen.configMap" . | fromYaml) "clusterTrustBundles") | default list -}}
{{- $signers = append $signers (required "config clusterTrustBundles[].signerName is required" .signerName) -}}
{{- end -}}
{{- uniq $signers | toJson -}}
{{- end -}}

{{/* The certgen arguments common to every run. */}}
{{- define "certgen.args" -}}
- --namespace
- {{ include "certgen.targetNamespace" . | quote }}
{{- if include "certgen.configText" . }}
- --config
- /etc/certgen/config.yaml
{{- else }}
- --profile
- {{ .Values.profile | quote }}
{{- end }}
{{- with .Values.clusterDomain }}
- --cluster-domain
- {{ . | quote }}
{{- end }}
{{- with .Values.clusterName }}
- --cluster-name
- {{ . | quote }}
{{- end }}
- --timeout
- {{ required "timeout is required" .Values.timeout | quote }}
{{- if .Values.wait }}
- --wait
{{- end }}
{{- if .Values.probe }}
- --probe
{{- end }}
{{- range .Values.renewalWindows }}
- --renewal-window
- {{ printf "%s;%s;%s" (required "renewalWindows[].cron is required" .cron) (required "renewalWindows[].windowDuration is required" .windowDuration) (default "UTC" .timezone) | quote }}
{{- end }}
{{- with .Values.renewalWindowMargin }}
- --renewal-window-margin
- {{ . | quote }}
{{- end }}
{{- with .Values.propagationDelay }}
- --propagation-delay
- {{ . | quote }}
{{- end }}
{{- if not .Values.topologyInjector }}
- --disable-topology-injector
{{- end }}
{{- range .Values.clusterTrustBundles }}
- --cluster-trust-bundle
- {{ . | quote }}
{{- end }}
{{- if .Values.events }}
- --events
{{- end }}
{{- with .Values.logFormat }}
- --log-format
- {{ . | quote }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
The pod spec shared by the hook Job and the CronJob. Call with (dict "root" $ "args" LIST
"identity" ID), LIST being the workload's own extra arguments and ID its identity ("hook" or
"release").
*/}}
{{- define "certgen.podSpec" -}}
{{- $root := .root -}}
{{- $identity := .identity -}}
{{- with $root -}}
serviceAccountName: {{ include "certgen.identityName" (dict "base" (include "certgen.serviceAccountName" .) "identity" $identity) }}
automountServiceAccountToken: true
restartPolicy: Never
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
containers:
  - name: certgen
    image: {{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) | quote }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command:
      {{- toYaml .Values.image.command | nindent 6 }}
    args:
      {{- include "certgen.args" . | nindent 6 }}
      {{- range $root_args := $.args }}
      - {{ $root_args | quote }}
      {{- end }}
    {{- with .Values.env }}
    env:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    resources:
      {{- toYaml .Values.resources | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      {{- if include "certgen.configText" . }}
      - name: config
        mountPath: /etc/certgen
        readOnly: true
      {{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 16Mi
  {{- if include "certgen.configText" . }}
  - name: config
    configMap:
      name: {{ include "certgen.identityName" (dict "base" (include "certgen.fullname" .) "identity" $identity) }}
  {{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* The exporter's name: the release's full name with "-exporter". */}}
{{- define "certgen.exporterName" -}}
{{- printf "%s-exporter" (include "certgen.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The caBundle targets the exporter watches, grouped by kind, as YAML: a map from the API
resource ("group/plural") to the list of object names. The config's `webhooks` when a config
is set, else Envoy Gateway's topology injector (envoy-gateway profile); the injector is left out
when topologyInjector is false, as certgen's --disable-topology-injector does.
*/}}
{{- define "certgen.caBundleTargets" -}}
{{- $ns := include "certgen.targetNamespace" . -}}
{{- $injector := printf "envoy-gateway-topology-injector.%s" $ns -}}
{{- $targets := list -}}
{{- if include "certgen.configText" . -}}
{{- $c := include "certgen.configMap" . | fromYaml -}}
{{- range $w := ($c.webhooks | default list) -}}
{{- $targets = append $targets (dict "kind" $w.kind "name" (replace "{namespace}" $ns $w.name)) -}}
{{- end -}}
{{- else if eq .Values.profile "envoy-gateway" -}}
{{- $targets = append $targets (dict "kind" "MutatingWebhookConfiguration" "name" $injector) -}}
{{- end -}}
{{- $resources := dict "MutatingWebhookConfiguration" "admissionregistration.k8s.io/mutatingwebhookconfigurations" "ValidatingWebhookConfiguration" "admissionregistration.k8s.io/validatingwebhookconfigurations" "APIService" "apiregistration.k8s.io/apiservices" -}}
{{- $byResource := dict -}}
{{- range $t := $targets -}}
{{- if or $.Values.topologyInjector (ne $t.name $injector) -}}
{{- $r := required (printf "unknown caBundle target kind %q" $t.kind) (get $resources $t.kind) -}}
{{- $_ := set $byResource $r (append (get $byResource $r | default list) $t.name | uniq) -}}
{{- end -}}
{{- end -}}
{{- toYaml $byResource -}}
{{- end -}}
