//! Records a run's [`EventLine`]s (planned by `crate::events`) as `events.k8s.io/v1` Events in the run's namespace, behind
//! the small [`EventRecorder`] trait.
//!
//! Deduplicated the way client-go's events recorder does: Events with the same type, reason,
//! action, note, reporting controller and object are one Event whose `series` counts them. client-go
//! keeps that series in memory, so each new process starts another Event; certgen runs are
//! short processes (a CronJob), so the Event's name is derived from that key instead, and a
//! later run that finds it (create answers 409) continues its series with one `patch`, after
//! one `get` for the count. A CronJob repeating a Warning therefore adds to one Event's count,
//! never a new Event per run.
//!
//! Recording is an extra: it never fails a run. The first refusal (403) is one warning, and no
//! more Events are attempted in the run; any other failure is one warning per Event.

use std::collections::HashMap;
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
    /// Records `line`, returning its outcome; never an error.
    fn record(&self, line: &EventLine) -> impl Future<Output = &'static str> + Send;
}

/// The Kubernetes recorder: one namespace, one client.
pub struct KubeEvents {
    api: Api<Event>,
    namespace: String,
    /// This process, as the Event's reportingInstance.
    instance: String,
    /// The series of this run, by Event name: the count last written.
    series: Mutex<HashMap<String, i32>>,
    /// The refusal note, once the API server refused (403).
    refused: Mutex<Option<String>>,
}

impl KubeEvents {
    /// A recorder of Events in `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "certgen".into());
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            instance: format!("{host}-{}", std::process::id())
                .chars()
                .take(128)
                .collect(),
            series: Mutex::default(),
            refused: Mutex::default(),
        }
    }

    /// The report line of a refusal, if the API server refused an Event in this run.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().expect("not poisoned").clone()
    }

    /// The Event's name: the object's, then a digest of what makes two Events the same.
    fn name(&self, line: &EventLine) -> String {
        // The note too: the API server keeps an Event's note immutable, so a different note
        // is a different Event (client-go's correlator keys on the message as well).
        let key = format!(
            "{}\0{}\0{}\0{}\0{}\0{}\0{}",
            line.kind, line.name, line.type_, line.reason, line.action, CONTROLLER, line.note
        );
        let digest = hex(&Sha256::digest(key.as_bytes())[..8]);
        let object: String = line.name.chars().take(200).collect();
        format!("{object}.certgen.{digest}")
    }

    fn event(&self, name: &str, line: &EventLine, now: MicroTime) -> Event {
        let api_version = crate::workload::Kind::parse(line.kind).map_or("v1", |k| k.api_version());
        Event {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(self.namespace.clone()),
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
            note: Some(line.note.chars().take(1000).collect()),
            reporting_controller: Some(CONTROLLER.to_string()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some(api_version.to_string()),
                kind: Some(line.kind.to_string()),
                name: Some(line.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectReference::default()
            }),
            ..Event::default()
        }
    }

    async fn try_record(&self, line: &EventLine) -> Result<(), kube::Error> {
        let name = self.name(line);
        let now = MicroTime(jiff_now());
        let known = self
            .series
            .lock()
            .expect("not poisoned")
            .get(&name)
            .copied();
        let count = match known {
            Some(count) => count,
            None => match self
                .api
                .create(
                    &PostParams::default(),
                    &self.event(&name, line, now.clone()),
                )
                .await
            {
                Ok(_) => {
                    self.series.lock().expect("not poisoned").insert(name, 1);
                    return Ok(());
                }
                // An earlier run's Event: continue its series.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let old = self.api.get(&name).await?;
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
        self.api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.series
            .lock()
            .expect("not poisoned")
            .insert(name, count + 1);
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
    async fn record(&self, line: &EventLine) -> &'static str {
        if self.refused().is_some() {
            return "refused";
        }
        match self.try_record(line).await {
            Ok(()) => "recorded",
            Err(kube::Error::Api(s)) if s.code == 403 => {
                let note = format!(
                    "events.events.k8s.io in {}: Events not recorded: this identity may not create them (403); grant create, get and patch on events.events.k8s.io",
                    self.namespace
                );
                tracing::warn!("{note}");
                *self.refused.lock().expect("not poisoned") = Some(note);
                "refused"
            }
            Err(e) => {
                tracing::warn!(
                    reason = line.reason,
                    object = %line.name,
                    "an Event was not recorded: {e}"
                );
                "failed"
            }
        }
    }
}

/// Records every line of `lines` in order, setting each one's outcome.
pub async fn record_all(recorder: &impl EventRecorder, lines: &mut [EventLine]) {
    for line in lines {
        line.outcome = recorder.record(line).await;
    }
}
