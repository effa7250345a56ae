{{- define "sparkmirror.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sparkmirror.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sparkmirror.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "sparkmirror.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sparkmirror.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* The ServiceAccount the mirrors' drivers and executors run as, in every served namespace. */}}
{{- define "sparkmirror.driverServiceAccountName" -}}
{{- default (printf "%s-driver" (include "sparkmirror.fullname" .) | trunc 63 | trimSuffix "-") .Values.driver.serviceAccountName -}}
{{- end -}}

{{- /* The namespaces the chart gives the operator rights in (Roles, NetworkPolicies), as a JSON list:
watchNamespaces, or the release's own namespace when it is empty. */}}
{{- define "sparkmirror.namespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- toJson .Values.watchNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{- /* The Lease the operator replicas elect their leader on, in the release's namespace. */}}
{{- define "sparkmirror.leaseName" -}}
{{- printf "%s-leader" (include "sparkmirror.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The mirrors' Spark driver pods: labelled by the operator (managed-by) and the Spark operator (spark-role). */}}
{{- define "sparkmirror.driverLabels" -}}
app.kubernetes.io/managed-by: sparkmirror-operator
spark-role: driver
{{- end -}}
