{{/*
Names, labels, the image reference, the effective feature gates and the resource API version, shared by every
template. Keep the gate defaults here in step with cdctl's own (and files/deviceclasses.yaml, which
cdctl/sim/rack/chart.py renders the same way).
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "cdctl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>" (just the release when it already contains the chart name), or fullnameOverride. */}}
{{- define "cdctl.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object the chart installs. */}}
{{- define "cdctl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "cdctl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component; call with (dict "root" $ "component" "controller"). */}}
{{- define "cdctl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cdctl.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "cdctl.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Service account names. The daemon's is fixed: the controller puts it into every daemon DaemonSet. */}}
{{- define "cdctl.controllerServiceAccount" -}}
{{- printf "%s-controller" (include "cdctl.fullname" .) -}}
{{- end -}}
{{- define "cdctl.kubeletPluginServiceAccount" -}}
{{- printf "%s-kubelet-plugin" (include "cdctl.fullname" .) -}}
{{- end -}}
{{- define "cdctl.daemonServiceAccount" -}}
compute-domain-daemon-service-account
{{- end -}}
{{/* The identity `cdctl collect` reads the event logs as (collector.enabled); "" when off. */}}
{{/* The shared IMEX daemon's DaemonSet and ServiceAccount (channel isolation, driver-managed). */}}
{{- define "cdctl.sharedDaemonName" -}}
{{ include "cdctl.fullname" . }}-imex-daemon
{{- end -}}

{{- define "cdctl.collectorServiceAccount" -}}
{{- if .Values.collector.enabled -}}
{{- printf "%s-collector" (include "cdctl.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Namespaces the controller manages daemons in: the release namespace, then additionalNamespaces. */}}
{{- define "cdctl.managedNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- range .Values.additionalNamespaces -}}
{{- $namespaces = append $namespaces . -}}
{{- end -}}
{{- $namespaces | uniq | join "," -}}
{{- end -}}

{{/*
The effective value ("true"/"false") of one feature gate; call with (dict "root" $ "gate" "HostManagedIMEX").
HostManagedIMEX (spelled either way, "cdctl.hostManagedMode") forces IMEXDaemonsWithDNSNames and
ComputeDomainCliques off, as the components do.
*/}}
{{- define "cdctl.gate" -}}
{{- $defaults := dict "IMEXDaemonsWithDNSNames" true "ComputeDomainCliques" true "CrashOnNVLinkFabricErrors" true "HostManagedIMEX" false -}}
{{- $gates := .root.Values.featureGates -}}
{{- $hostManaged := eq (include "cdctl.hostManagedMode" .root) "true" -}}
{{- $value := index $defaults .gate -}}
{{- if hasKey $gates .gate -}}
{{- $value = index $gates .gate -}}
{{- end -}}
{{- if eq .gate "HostManagedIMEX" -}}
{{- $value = $hostManaged -}}
{{- end -}}
{{- if and (has .gate (list "IMEXDaemonsWithDNSNames" "ComputeDomainCliques")) $hostManaged -}}
{{- $value = false -}}
{{- end -}}
{{- ternary "true" "false" $value -}}
{{- end -}}

{{/* "true" when the driver runs the IMEX daemons itself (HostManagedIMEX off). */}}
{{- define "cdctl.driverManaged" -}}
{{- ternary "false" "true" (eq (include "cdctl.gate" (dict "root" . "gate" "HostManagedIMEX")) "true") -}}
{{- end -}}

{{/*
"true" when ComputeDomains are isolated by IMEX channel on a shared IMEX domain
(`resources.computeDomains.imex.isolation: channel`, docs/channel-isolation.md, docs/admission.md): the
controller's IMEX_ISOLATION, its RBAC and the claim admission policy's channel-isolation rules
(files/admission-policies.yaml, constant channelIsolation) follow it.
*/}}
{{- define "cdctl.channelIsolation" -}}
{{- ternary "true" "false" (eq (.Values.resources.computeDomains.imex.isolation | default "domain" | toString) "channel") -}}
{{- end -}}

{{/* Channels per IMEX domain under channel isolation (IMEX_CHANNEL_COUNT). */}}
{{- define "cdctl.imexChannelCount" -}}
{{- .Values.resources.computeDomains.imexChannelCount | default 2048 | int -}}
{{- end -}}

{{/*
Who creates ResourceClaims for pods from their ResourceClaimTemplates: kube-controller-manager's
resource-claim controller, as its own service account (--use-service-account-credentials, the kubeadm
default) or as the controller manager itself. Comma-separated.
*/}}
{{- define "cdctl.claimControllerUsers" -}}
system:serviceaccount:kube-system:resource-claim-controller,system:kube-controller-manager
{{- end -}}

{{/* FEATURE_GATES: the gates set in values, sorted, "Name=value" joined by commas (empty: all defaults). */}}
{{- define "cdctl.featureGates" -}}
{{- $pairs := list -}}
{{- range $name, $value := .Values.featureGates -}}
{{- $pairs = append $pairs (printf "%s=%t" $name $value) -}}
{{- end -}}
{{- $pairs | join "," -}}
{{- end -}}

{{/* The resource.k8s.io version of DeviceClasses: resourceApiVersion, else the newest the cluster serves. */}}
{{- define "cdctl.resourceApiVersion" -}}
{{- if .Values.resourceApiVersion -}}
{{- printf "resource.k8s.io/%s" (.Values.resourceApiVersion | trimPrefix "resource.k8s.io/") -}}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1" -}}
resource.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta2" -}}
resource.k8s.io/v1beta2
{{- else -}}
resource.k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/* The kubelet plugin's data directory on the host (DRA socket, event log, per-domain IMEX directories). */}}
{{- define "cdctl.pluginDataDirectory" -}}
{{- $c := include "cdctl.compat" . | fromYaml -}}
{{- printf "%s/compute-domain.nvidia.com" (trimSuffix "/" $c.kubeletPluginsDirectoryPath) -}}
{{- end -}}

{{/* CD_DAEMON_IMAGE_PULL_SECRET_NAMES: the imagePullSecrets names joined by commas. */}}
{{- define "cdctl.pullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- $names | join "," -}}
{{- end -}}

{{/* The Secret holding the event logs' key (eventLog.keySecret), and where the components read it. */}}
{{- define "cdctl.eventLogKeySecret" -}}
{{- default (printf "%s-event-log-key" (include "cdctl.fullname" .)) .Values.eventLog.keySecret.name -}}
{{- end -}}
{{- define "cdctl.eventLogKeyDir" -}}
/etc/cdctl/event-log-key
{{- end -}}

{{/*
The controller pods' affinity: controller.affinity, plus (with more than one replica, unless it sets its own)
a pod anti-affinity on kubernetes.io/hostname, preferred ("soft") or required ("hard"), so that one node's loss
does not take every replica.
*/}}
{{- define "cdctl.controllerAffinity" -}}
{{- $affinity := deepCopy (.Values.controller.affinity | default dict) -}}
{{- $mode := .Values.controller.podAntiAffinity -}}
{{- if and (gt (int .Values.controller.replicas) 1) $mode (not (hasKey $affinity "podAntiAffinity")) -}}
{{- $selector := include "cdctl.selectorLabels" (dict "root" . "component" "controller") | fromYaml -}}
{{- $term := dict "labelSelector" (dict "matchLabels" $selector) "topologyKey" "kubernetes.io/hostname" -}}
{{- if eq $mode "hard" -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $weighted := dict "weight" 100 "podAffinityTerm" $term -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list $weighted)) -}}
{{- end -}}
{{- end -}}
{{- if $affinity -}}
{{- toYaml $affinity -}}
{{- end -}}
{{- end -}}
