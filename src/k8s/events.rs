//! Records a run's [`EventLine`]s (planned by `crate::events`) as `events.k8s.io/v1` Events,
//! behind the small [`EventRecorder`] trait: in the run's namespace for its Secrets and
//! workloads, and in `default` for the cluster-scoped `caBundle` targets (webhook
//! configurations, APIServices). The API server accepts an Event about a cluster-scoped object
//! only in `default` or `kube-system`, and `default` is where client-go's recorder and
//! `kubectl events --for` put them.
//!
//! Deduplicated the way client-go's events recorder does: Events with the same type, reason,
//! action, note, reporting controller and object are one Event whose `series` counts them. client-go
//! keeps that series in memory, so each new process starts another Event; certgen runs are
//! short processes (a CronJob), so the Event's name is derived from that key instead, and a
//! later run that finds it (create answers 409) continues its series with one `patch`, after
//! one `get` for the count. A CronJob repeating a Warning therefore adds to one Event's count,
//! never a new Event per run.
//!
//! Recording is an extra: it never fails a run. The first refusal (403) in a namespace is one
//! warning and one `skipped` line, and no more Events are attempted there in the run (a
//! refusal in `default` leaves the run's own namespace alone); any other failure is one
//! warning per Event.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use sha2::{Digest, Sha256};

use crate::report::EventLine;

/// The reporting controller name on every Event certgen records.
pub const CONTROLLER: &str = "certgen";

/// Records Events; the outcome of each line (`recorded`, `refused`, `failed`).
pub trait EventRecorder {
    /// Records `line`, returning what became of it; never an error.
    fn record(&self, line: &EventLine) -> impl Future<Output = Recorded> + Send;
}

/// The namespace of a cluster-scoped object's Events.
pub const CLUSTER_NAMESPACE: &str = "default";

/// The `apiVersion` of an Event's `regarding` object of `kind`, and whether it is cluster-scoped
/// (the `caBundle` targets are).
fn regarding_kind(kind: &str) -> (&'static str, bool) {
    if kind == "ClusterTrustBundle" {
        return ("certificates.k8s.io/v1", true);
    }
    match crate::config::WebhookKind::parse(kind) {
        Some(target) => (target.api_version(), true),
        None => (
            crate::workload::Kind::parse(kind).map_or("v1", |k| k.api_version()),
            false,
        ),
    }
}

/// The Kubernetes recorder: the run's namespace and `default`, one client.
pub struct KubeEvents {
    client: kube::Client,
    /// The run's namespace (its Secrets and workloads).
    namespace: String,
    /// This process, as the Event's reportingInstance.
    instance: String,
    /// The series of this run, by namespace and Event name: the count last written.
    series: Mutex<HashMap<(String, String), i32>>,
    /// The namespaces where the API server refused an Event (403) in this run.
    refused: Mutex<BTreeSet<String>>,
}

impl KubeEvents {
    /// A recorder of the Events of a run in `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "certgen".into());
        Self {
            client,
            namespace: namespace.to_string(),
            instance: format!("{host}-{}", std::process::id())
                .chars()
                .take(128)
                .collect(),
            series: Mutex::default(),
            refused: Mutex::default(),
        }
    }

    /// Where the Event of `line` is recorded.
    fn namespace_of(&self, line: &EventLine) -> &str {
        if regarding_kind(line.kind).1 {
            CLUSTER_NAMESPACE
        } else {
            &self.namespace
        }
    }

    /// The Event's name: the object's, then a digest of what makes two Events the same.
    fn name(&self, line: &EventLine) -> String {
        // The note too: the API server keeps an Event's note immutable, so a different note
        // is a different Event (client-go's correlator keys on the message as well).
        // And the run's namespace: the Event of a cluster-scoped object is in `default`, where
        // certgen runs of two namespaces may both record one about the same object.
        let key = format!(
            "{}\0{}\0{}\0{}\0{}\0{}\0{}\0{}",
            line.kind,
            line.name,
            line.type_,
            line.reason,
            line.action,
            CONTROLLER,
            line.note,
            self.namespace
        );
        let digest = hex(&Sha256::digest(key.as_bytes())[..8]);
        // An Event's name is a DNS subdomain: a ClusterTrustBundle's ':' becomes '.'.
        let object: String = line
            .name
            .chars()
            .take(200)
            .map(|c| if c == ':' { '.' } else { c })
            .collect();
        format!("{object}.certgen.{digest}")
    }

    fn event(&self, name: &str, line: &EventLine, now: MicroTime) -> Event {
        let (api_version, cluster_scoped) = regarding_kind(line.kind);
        let note = if cluster_scoped {
            format!("{} (certgen in namespace {})", line.note, self.namespace)
        } else {
            line.note.clone()
        };
        Event {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.namespace_of(line).to_string()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_string(),
                        "certgen".to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            event_time: Some(now),
            action: Some(line.action.to_string()),
            reason: Some(line.reason.to_string()),
            type_: Some(line.type_.to_string()),
            note: Some(note.chars().take(1000).collect()),
            reporting_controller: Some(CONTROLLER.to_string()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some(api_version.to_string()),
                kind: Some(line.kind.to_string()),
                name: Some(line.name.clone()),
                namespace: (!cluster_scoped).then(|| self.namespace.clone()),
                ..ObjectReference::default()
            }),
            ..Event::default()
        }
    }

    async fn try_record(&self, line: &EventLine) -> Result<(), kube::Error> {
        let name = self.name(line);
        let namespace = self.namespace_of(line).to_string();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let key = (namespace, name.clone());
        let now = MicroTime(jiff_now());
        let known = self.series.lock().expect("not poisoned").get(&key).copied();
        let count = match known {
            Some(count) => count,
            None => match api
                .create(
                    &PostParams::default(),
                    &self.event(&name, line, now.clone()),
                )
                .await
            {
                Ok(_) => {
                    self.series.lock().expect("not poisoned").insert(key, 1);
                    return Ok(());
                }
                // An earlier run's Event: continue its series.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let old = api.get(&name).await?;
                    old.series.map_or(1, |s| s.count)
                }
                Err(e) => return Err(e),
            },
        };
        let series = EventSeries {
            count: count + 1,
            last_observed_time: now,
        };
        let patch = serde_json::json!({ "series": series });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.series
            .lock()
            .expect("not poisoned")
            .insert(key, count + 1);
        Ok(())
    }
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl EventRecorder for KubeEvents {
    async fn record(&self, line: &EventLine) -> Recorded {
        let namespace = self.namespace_of(line).to_string();
        if self
            .refused
            .lock()
            .expect("not poisoned")
            .contains(&namespace)
        {
            return Recorded::outcome("refused");
        }
        match self.try_record(line).await {
            Ok(()) => Recorded::outcome("recorded"),
            Err(kube::Error::Api(s)) if s.code == 403 => {
                let why = if namespace == CLUSTER_NAMESPACE && namespace != self.namespace {
                    " (Events about cluster-scoped objects such as webhook configurations are kept there)"
                } else {
                    ""
                };
                let note = format!(
                    "events.events.k8s.io in {namespace}: Events not recorded: this identity may not create them (403){why}; grant create, get and patch on events.events.k8s.io in {namespace}"
                );
                tracing::warn!("{note}");
                self.refused.lock().expect("not poisoned").insert(namespace);
                Recorded {
                    outcome: "refused",
                    refusal: Some(note),
                }
            }
            Err(e) => {
                tracing::warn!(
                    reason = line.reason,
                    object = %line.name,
                    "an Event was not recorded: {e}"
                );
                Recorded::outcome("failed")
            }
        }
    }
}

/// What became of one Event: its outcome (`recorded`, `refused`, `failed`) and, for the first
/// refusal in a namespace, the report's `skipped` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub outcome: &'static str,
    pub refusal: Option<String>,
}

impl Recorded {
    fn outcome(outcome: &'static str) -> Self {
        Self {
            outcome,
            refusal: None,
        }
    }
}

/// Records every line of `lines` in order, setting each one's outcome; the `skipped` lines of
/// the refusals, one per namespace that refused.
pub async fn record_all(recorder: &impl EventRecorder, lines: &mut [EventLine]) -> Vec<String> {
    let mut refusals = Vec::new();
    for line in lines {
        let recorded = recorder.record(line).await;
        line.outcome = recorded.outcome;
        refusals.extend(recorded.refusal);
    }
    refusals
}
