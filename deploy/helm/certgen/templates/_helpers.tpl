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
- --timeout
- {{ required "timeout is required" .Values.timeout | quote }}
{{- if .Values.wait }}
- --wait
{{- end }}
{{- if .Values.probe }}
- --probe
{{- end }}
{{- with .Values.propagationDelay }}
- --propagation-delay
- {{ . | quote }}
{{- end }}
{{- if not .Values.topologyInjector }}
- --disable-topology-injector
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
The pod spec shared by the hook Job and the CronJob. Call with (dict "root" $ "args" LIST),
LIST being the workload's own extra arguments.
*/}}
{{- define "certgen.podSpec" -}}
{{- $root := .root -}}
{{- with $root -}}
serviceAccountName: {{ include "certgen.serviceAccountName" . }}
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
      name: {{ include "certgen.fullname" . }}
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
