//! What the exporter's watches have seen, and the metrics computed from it at scrape time.
//!
//! A plain value: the managed Secrets as stored (only the names the config manages are kept),
//! the `caBundle` of each target the config names, and whether each watch has finished its
//! first LIST. The watches' [`Change`]s ([`crate::k8s::watch`]) change it; a scrape reads it and computes
//! the same families `certgen check --output prometheus` prints, with `now` the scrape's time,
//! so that everything that depends on time (a certificate now due, a CA now expired, a
//! rotation's phase) is as of the scrape, never as of the last event. It must not make any
//! API call and never keeps or exposes more than `check` does (no key material in any label).

use std::collections::BTreeMap;

use time::OffsetDateTime;

use crate::api_requests::ApiRequests;
use crate::config::{Config, WebhookKind};
use crate::exposition::{self, CaBundleTarget, Family, TargetState};
use crate::k8s::watch::{Change, Labelled, TargetSeen};
use crate::k8s::webhooks::topology_namespace;
use crate::observe::Snapshot;
use crate::secret::{Observed, StoredSecret};

/// Whether the watch of one resource kind has listed what exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Sync {
    /// The first LIST has not completed yet (or failed, and the watch retries it).
    #[default]
    Pending,
    /// Listed, and followed by the watch since.
    Synced,
    /// The API server refused the LIST or WATCH (403): the targets of this kind are `refused`.
    Refused,
}

/// The resource name of the ClusterTrustBundles' watches (metrics' `resource` label).
const BUNDLES: &str = "clustertrustbundles";

/// The `caBundle`s (one per entry) of each present target of a kind, by name.
type Bundles = BTreeMap<String, TargetSeen>;

/// The resource the labelled topology injectors' watch counts its events under.
const INJECTORS: &str = "mutatingwebhookconfigurations";

/// What stands for a target no object has the name of.
enum StandIn<'a> {
    /// The labelled objects are not listed yet.
    Pending,
    /// Nothing (`None`: the target is absent), or the one labelled object that does.
    Found(Option<&'a TargetSeen>),
    /// Several labelled objects could: a run refuses to choose.
    Several,
}

/// Whether `config` names Envoy Gateway's topology injector by its chart's name, so that a
/// renamed one is looked for by label.
pub fn looks_by_label(config: &Config) -> bool {
    config
        .webhooks
        .iter()
        .any(|t| topology_namespace(t.kind, &t.name).is_some())
}

/// The exporter's view of the cluster.
#[derive(Debug, Clone)]
pub struct State {
    secrets: BTreeMap<String, StoredSecret>,
    secrets_sync: Sync,
    /// Per target kind (`describe`'s kind name): the caBundles of each named object present.
    targets: BTreeMap<&'static str, (Sync, Bundles)>,
    /// The objects labelled as Envoy Gateway's topology injector, by name: `None` unless the
    /// config names the injector by its chart's name (then a renamed one is found by label).
    injectors: Option<(Sync, BTreeMap<String, Labelled>)>,
    /// Watch events applied, per resource (`secrets`, `mutatingwebhookconfigurations`, ...).
    events: BTreeMap<&'static str, u64>,
    /// Changes so far: a memo of the health metrics is valid for one generation.
    generation: u64,
    /// The data keys certgen owns in each managed Secret, and those it must hold.
    owned: BTreeMap<String, (Vec<String>, Vec<String>)>,
    /// Every undo of certgen's writes the watches saw, by `Kind/name`: a `caBundle` stripped
    /// and restored several times between two scrapes is still seen as a fight.
    undos: BTreeMap<String, Vec<crate::observe::writers::Undo>>,
    /// The writer that last removed each target's `caBundle` (by `Kind/name`), while it is
    /// still missing: the API server keeps no record of a removal, the watch saw it happen.
    removed_by: BTreeMap<String, crate::attribution::Writer>,
    /// The ClusterTrustBundles of each configured signer, by name.
    bundles: BTreeMap<String, (Sync, BTreeMap<String, crate::trust_bundles::BundleRead>)>,
}

/// The health metrics rendered at one time, reused by later scrapes while nothing they depend
/// on can have changed: the same generation of the state, and no certificate time boundary
/// (notBefore, notAfter, notAfter minus a renewBefore) crossed since.
#[derive(Debug, Clone)]
pub struct Memo {
    generation: u64,
    from: OffsetDateTime,
    until: Option<OffsetDateTime>,
    text: bytes::Bytes,
}

/// The kind name of a target kind, as in the metrics' `target_kind` label.
pub fn kind_name(kind: WebhookKind) -> &'static str {
    kind.as_str()
}

impl State {
    /// Nothing seen yet, for the target kinds of `config`.
    pub fn new(config: &Config) -> Self {
        let targets = config
            .webhooks
            .iter()
            .map(|t| (kind_name(t.kind), (Sync::Pending, BTreeMap::new())))
            .collect();
        Self {
            secrets: BTreeMap::new(),
            secrets_sync: Sync::Pending,
            targets,
            injectors: looks_by_label(config).then(|| (Sync::Pending, BTreeMap::new())),
            events: BTreeMap::new(),
            generation: 0,
            owned: config
                .secret_names()
                .into_iter()
                .map(|n| (n.to_string(), crate::attribution::keys_of(config, n)))
                .collect(),
            undos: BTreeMap::new(),
            bundles: config
                .trust_bundles
                .iter()
                .map(|t| (t.signer.clone(), (Sync::Pending, BTreeMap::new())))
                .collect(),
            removed_by: BTreeMap::new(),
        }
    }

    /// Applies what a watch learned.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::SecretsListed(s) => self.secrets_listed(s),
            Change::SecretApplied(s) => self.secret_applied(s),
            Change::SecretDeleted(name) => self.secret_deleted(&name),
            Change::SecretsRefused => self.secrets_refused(),
            Change::TargetsListed(kind, found) => self.targets_listed(kind, found),
            Change::TargetApplied(kind, name, b) => self.target_applied(kind, name, b),
            Change::TargetDeleted(kind, name) => self.target_deleted(kind, &name),
            Change::TargetsRefused(kind) => self.targets_refused(kind),
            Change::InjectorsListed(found) => self.injectors_listed(found),
            Change::InjectorApplied(name, l) => self.injector_applied(name, l),
            Change::InjectorDeleted(name) => self.injector_deleted(&name),
            Change::InjectorsRefused => self.injectors_refused(),
            Change::BundlesListed(signer, found) => {
                self.count(BUNDLES, found.len() as u64);
                let found = found.into_iter().map(|b| (b.name.clone(), b)).collect();
                self.bundles.insert(signer, (Sync::Synced, found));
            }
            Change::BundleApplied(signer, b) => {
                self.count(BUNDLES, 1);
                let entry = self.bundles.entry(signer).or_default();
                entry.1.insert(b.name.clone(), b);
            }
            Change::BundleDeleted(signer, name) => {
                self.count(BUNDLES, 1);
                if let Some((_, found)) = self.bundles.get_mut(&signer) {
                    found.remove(&name);
                }
            }
            Change::BundlesRefused(signer) => {
                self.count(BUNDLES, 0);
                let entry = self.bundles.entry(signer).or_default();
                entry.0 = Sync::Refused;
                entry.1.clear();
            }
        }
    }

    fn count(&mut self, resource: &'static str, n: u64) {
        self.generation += 1;
        *self.events.entry(resource).or_default() += n;
    }

    /// A complete LIST of the managed Secrets (after a watch (re)started): replaces what was
    /// known, so a Secret deleted while the watch was down is gone.
    pub fn secrets_listed(&mut self, secrets: Vec<StoredSecret>) {
        self.count("secrets", secrets.len() as u64);
        self.secrets = secrets.into_iter().map(|s| (s.name.clone(), s)).collect();
        self.secrets_sync = Sync::Synced;
    }

    /// A managed Secret was created or changed.
    pub fn secret_applied(&mut self, secret: StoredSecret) {
        self.count("secrets", 1);
        if let Some((keys, required)) = self.owned.get(&secret.name) {
            let now = OffsetDateTime::now_utc();
            let w = crate::attribution::of_secret(&secret, (keys, required), &[], now);
            let key = crate::attribution::key("Secret", &secret.name);
            crate::attribution::remember(self.undos.entry(key).or_default(), w.as_ref(), now);
        }
        self.secrets.insert(secret.name.clone(), secret);
    }

    /// A managed Secret was deleted.
    pub fn secret_deleted(&mut self, name: &str) {
        self.count("secrets", 1);
        self.secrets.remove(name);
    }

    /// The Secrets' watch failed; it retries (what was known stays).
    pub fn secrets_refused(&mut self) {
        self.generation += 1;
        if self.secrets_sync == Sync::Pending {
            self.secrets_sync = Sync::Refused;
        }
    }

    /// A complete LIST of the targets of `kind`: each present object's caBundles by name.
    pub fn targets_listed(&mut self, kind: WebhookKind, found: Vec<(String, TargetSeen)>) {
        self.count(resource(kind), found.len() as u64);
        let entry = self.targets.entry(kind_name(kind)).or_default();
        *entry = (Sync::Synced, found.into_iter().collect());
    }

    /// A target of `kind` was created or changed.
    pub fn target_applied(&mut self, kind: WebhookKind, name: String, bundles: TargetSeen) {
        self.count(resource(kind), 1);
        let now = OffsetDateTime::now_utc();
        let missing = bundles.bundles.iter().any(Vec::is_empty);
        let key = crate::attribution::key(kind_name(kind), &name);
        let before = self
            .targets
            .get(kind_name(kind))
            .and_then(|(_, found)| found.get(&name))
            .map(|seen| seen.writes.clone())
            .unwrap_or_default();
        let mut w = crate::attribution::of_target(
            kind_name(kind),
            &name,
            &bundles.writes,
            missing,
            &[],
            now,
        );
        if !missing {
            self.removed_by.remove(&key);
        } else if w.is_none() {
            let removal = crate::attribution::of_removal(
                kind_name(kind),
                &name,
                (&before, &bundles.writes),
                now,
            );
            if let Some(r) = removal {
                self.removed_by.insert(key.clone(), r);
            }
            w = self.removed_by.get(&key).cloned();
        }
        crate::attribution::remember(self.undos.entry(key).or_default(), w.as_ref(), now);
        self.targets
            .entry(kind_name(kind))
            .or_default()
            .1
            .insert(name, bundles);
    }

    /// A target of `kind` was deleted.
    pub fn target_deleted(&mut self, kind: WebhookKind, name: &str) {
        self.count(resource(kind), 1);
        if let Some((_, found)) = self.targets.get_mut(kind_name(kind)) {
            found.remove(name);
        }
    }

    /// The API server refused to list or watch the targets of `kind` (403).
    pub fn targets_refused(&mut self, kind: WebhookKind) {
        self.generation += 1;
        let entry = self.targets.entry(kind_name(kind)).or_default();
        entry.0 = Sync::Refused;
        entry.1.clear();
    }

    /// A complete LIST of the objects labelled as the topology injector.
    pub fn injectors_listed(&mut self, found: Vec<(String, Labelled)>) {
        self.count(INJECTORS, found.len() as u64);
        self.injectors = Some((Sync::Synced, found.into_iter().collect()));
    }

    /// An object labelled as the topology injector was created or changed.
    pub fn injector_applied(&mut self, name: String, labelled: Labelled) {
        self.count(INJECTORS, 1);
        if let Some((_, found)) = &mut self.injectors {
            found.insert(name, labelled);
        }
    }

    /// An object labelled as the topology injector was deleted, or lost the label.
    pub fn injector_deleted(&mut self, name: &str) {
        self.count(INJECTORS, 1);
        if let Some((_, found)) = &mut self.injectors {
            found.remove(name);
        }
    }

    /// The API server refused to list or watch the labelled objects (403): none is found by
    /// label, as for a run without that right.
    pub fn injectors_refused(&mut self) {
        self.generation += 1;
        if let Some(injectors) = &mut self.injectors {
            *injectors = (Sync::Refused, BTreeMap::new());
        }
    }

    /// Whether every watch knows what exists (a refused target kind counts: its targets are
    /// known to be `refused`): the exporter is ready.
    pub fn ready(&self) -> bool {
        self.secrets_sync == Sync::Synced
            && self.targets.values().all(|(s, _)| *s != Sync::Pending)
            && self
                .injectors
                .as_ref()
                .is_none_or(|(s, _)| *s != Sync::Pending)
            && self.bundles.values().all(|(s, _)| *s != Sync::Pending)
    }

    /// The object that stands for target `name` of `kind` when no object has that name, as a
    /// run finds it: Envoy Gateway's topology injector by its label, if exactly one labelled
    /// object calls a Service in its namespace.
    fn stand_in(&self, kind: WebhookKind, name: &str) -> StandIn<'_> {
        let (Some(namespace), Some((sync, found))) =
            (topology_namespace(kind, name), &self.injectors)
        else {
            return StandIn::Found(None);
        };
        if *sync == Sync::Pending {
            return StandIn::Pending;
        }
        let serving: Vec<&Labelled> = found
            .values()
            .filter(|l| l.namespaces.contains(namespace))
            .collect();
        match serving[..] {
            [] => StandIn::Found(None),
            [one] => StandIn::Found(Some(&one.seen)),
            _ => StandIn::Several,
        }
    }

    /// The Secrets as `check` would read them.
    fn snapshot(&self, config: &Config) -> Snapshot {
        let get = |name: &str| match self.secrets.get(name) {
            Some(s) => Observed::Present(s.clone()),
            None => Observed::Absent,
        };
        let mut snapshot = Snapshot {
            ca: Some(get(&config.ca.secret_name)),
            ..Snapshot::default()
        };
        for name in config
            .tls
            .iter()
            .map(|t| &t.name)
            .chain(config.hmac.iter().map(|h| &h.name))
        {
            snapshot.secrets.insert(name.clone(), get(name));
        }
        snapshot
    }

    /// Each `caBundle` target whose kind's watch has synced or was refused.
    fn targets(
        &self,
        config: &Config,
        observed: &Snapshot,
        now: OffsetDateTime,
    ) -> Vec<CaBundleTarget> {
        let mut out = Vec::new();
        for t in &config.webhooks {
            let kind = kind_name(t.kind);
            let Some((sync, found)) = self.targets.get(kind) else {
                continue;
            };
            let mut writer = None;
            let state = match sync {
                Sync::Pending => continue,
                Sync::Refused => TargetState::Refused,
                Sync::Synced => match found.get(&t.name).map_or_else(
                    || self.stand_in(t.kind, &t.name),
                    |seen| StandIn::Found(Some(seen)),
                ) {
                    StandIn::Pending => continue,
                    StandIn::Several => TargetState::Ambiguous,
                    StandIn::Found(None) => TargetState::Absent,
                    StandIn::Found(Some(seen)) => {
                        let mut seen_undos: Vec<crate::observe::writers::Undo> = self
                            .undos
                            .get(&crate::attribution::key(kind, &t.name))
                            .cloned()
                            .unwrap_or_default();
                        seen_undos.extend(seen.recorded.iter().cloned());
                        let seen_undos = seen_undos.as_slice();
                        let key = crate::attribution::key(kind, &t.name);
                        writer = crate::attribution::of_target(
                            kind,
                            &t.name,
                            &seen.writes,
                            seen.bundles.iter().any(Vec::is_empty),
                            seen_undos,
                            now,
                        )
                        .or_else(|| {
                            let mut w = self.removed_by.get(&key)?.clone();
                            w.fight =
                                crate::observe::writers::fight(seen_undos, Some(&w.write), now);
                            Some(w)
                        });
                        TargetState::of_present(config, t, observed, seen.injected, &seen.bundles)
                    }
                },
            };
            out.push(CaBundleTarget {
                writer,
                kind: kind.to_string(),
                name: t.name.clone(),
                secret: t.bundle_from.clone(),
                state,
                // Said only by `check`: the exporter's report becomes metrics, which do not
                // carry it.
                pending_missing: None,
            });
        }
        // The ClusterTrustBundles, judged by `check`'s own rule once their watch has listed them.
        for t in &config.trust_bundles {
            let read: Option<Vec<crate::trust_bundles::BundleRead>> =
                match self.bundles.get(&t.signer) {
                    None | Some((Sync::Pending, _)) => continue,
                    Some((Sync::Refused, _)) => None,
                    Some((Sync::Synced, found)) => Some(found.values().cloned().collect()),
                };
            out.push(exposition::collect::trust_bundle_target(
                config,
                t,
                observed,
                read.as_deref(),
                now,
            ));
        }
        out
    }

    /// The metrics at `now`: `check`'s families (once the Secrets are listed: before, every
    /// Secret would look missing) and the exporter's own.
    pub fn families(
        &self,
        config: &Config,
        now: OffsetDateTime,
        requests: ApiRequests,
    ) -> Vec<Family> {
        let mut out = self.health(config, &self.snapshot(config), now);
        out.extend(self.own(requests));
        out
    }

    /// What a scrape at `now` serves: [`Self::families`] rendered, the health part taken from
    /// `memo` when it is still exact at `now`, else computed and remembered.
    pub fn scrape(
        &self,
        config: &Config,
        now: OffsetDateTime,
        requests: ApiRequests,
        memo: &mut Option<Memo>,
    ) -> String {
        let (health, own) = self.scrape_parts(config, now, requests, memo);
        String::from_utf8_lossy(&health).into_owned() + &own
    }

    /// [`Self::scrape`] in its two parts: the health metrics as the memo holds them (shared:
    /// every response of the same generation points to one rendering, however slowly its
    /// reader takes it), and the exporter's own.
    pub fn scrape_parts(
        &self,
        config: &Config,
        now: OffsetDateTime,
        requests: ApiRequests,
        memo: &mut Option<Memo>,
    ) -> (bytes::Bytes, String) {
        let fresh = memo.as_ref().is_some_and(|m| {
            m.generation == self.generation && m.from <= now && m.until.is_none_or(|u| now < u)
        });
        if !fresh {
            // One snapshot, parsed once, for both.
            let observed = self.snapshot(config);
            *memo = Some(Memo {
                generation: self.generation,
                from: now,
                until: self.next_boundary(config, &observed, now),
                text: exposition::render(&self.health(config, &observed, now)).into(),
            });
        }
        let health = memo.as_ref().expect("just set").text.clone();
        (health, exposition::render(&self.own(requests)))
    }

    /// The first instant after `now` at which a health metric of this state can change: every
    /// comparison `check`, the planner and the rotation phase make with `now` is against a
    /// certificate's notBefore, notAfter, or notAfter minus a renewBefore of the config, or a
    /// gate's opening (a Secret's last write plus the propagation delay).
    fn next_boundary(
        &self,
        config: &Config,
        observed: &Snapshot,
        now: OffsetDateTime,
    ) -> Option<OffsetDateTime> {
        use crate::observe::parse::Field;
        let mut renew_before: Vec<std::time::Duration> = std::iter::once(config.ca.renew_before)
            .chain(config.tls.iter().map(|t| t.renew_before))
            .collect();
        renew_before.sort();
        renew_before.dedup();
        // Of the Secrets the config names (no other moves a health metric), as `observed`
        // parsed them.
        let mut certs = Vec::new();
        for name in self.secrets.keys() {
            if *name == config.ca.secret_name {
                let Some(ca) = observed.ca_parsed(&config.ca.layout) else {
                    continue;
                };
                certs.extend(ca.cert.ok().cloned());
                certs.extend(ca.next_cert.ok().cloned());
                if let Field::Ok(b) = &ca.bundle {
                    certs.extend(b.certs.iter().cloned());
                }
            } else {
                let Some(leaf) = observed.leaf_parsed(name, &config.layout_of(name)) else {
                    continue;
                };
                certs.extend(leaf.cert.ok().cloned());
                if let Field::Ok(b) = &leaf.bundle {
                    certs.extend(b.certs.iter().cloned());
                }
            }
        }
        let mut next: Option<OffsetDateTime> = None;
        let mut consider = |t: OffsetDateTime| {
            if t > now && next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        };
        let delay = time::Duration::try_from(crate::config::CLUSTER_PROPAGATION_DELAY)
            .unwrap_or(time::Duration::MAX);
        for written in self.secrets.values().filter_map(|s| s.written_at) {
            consider(written);
            if let Some(t) = written.checked_add(delay) {
                consider(t);
            }
        }
        for c in &certs {
            consider(c.not_before);
            consider(c.not_after);
            for rb in &renew_before {
                let rb = time::Duration::try_from(*rb).unwrap_or(time::Duration::MAX);
                if let Some(t) = c.not_after.checked_sub(rb) {
                    consider(t);
                }
            }
        }
        next
    }

    /// `check`'s families at `now`, once the Secrets are listed.
    fn health(&self, config: &Config, observed: &Snapshot, now: OffsetDateTime) -> Vec<Family> {
        if self.secrets_sync != Sync::Synced {
            return Vec::new();
        }
        let ctx = crate::check::Context {
            undos: self.undos.clone(),
            propagation_delay: crate::config::CLUSTER_PROPAGATION_DELAY,
            targets: self.targets(config, observed, now),
            unreadable: Vec::new(),
            in_set: false,
        };
        let report = crate::check::check(
            config,
            observed,
            now,
            format!("namespace {}", config.namespace),
            &ctx,
        );
        exposition::health(config, observed, &report, now)
    }

    /// The exporter's own families.
    fn own(&self, requests: ApiRequests) -> Vec<Family> {
        let mut synced = Family::gauge(
            "certgen_exporter_watch_synced",
            "1 when the exporter's watch of a resource has listed it and follows it, else 0 (not listed yet, or refused).",
        );
        let mut sync = |resource: &str, s: Sync| {
            synced.push(
                vec![("resource", resource.to_string())],
                f64::from(u8::from(s == Sync::Synced)),
            );
        };
        sync("secrets", self.secrets_sync);
        for (kind, (s, _)) in &self.targets {
            // Keyed by the kinds of the config (`kind_name`): always one of them.
            sync(
                WebhookKind::parse(kind).map_or(kind, WebhookKind::plural),
                *s,
            );
        }
        for (s, _) in self.bundles.values() {
            sync(BUNDLES, *s);
        }
        let mut events = Family::counter(
            "certgen_exporter_watch_events_total",
            "Objects the exporter's watches have received (listed or changed), by resource.",
        );
        for (resource, n) in &self.events {
            events.push(vec![("resource", resource.to_string())], *n as f64);
        }
        let mut api = Family::counter(
            "certgen_exporter_api_requests_total",
            "Kubernetes API requests the exporter has made, by verb: a LIST and WATCHes per resource kind, never a GET per object.",
        );
        for (verb, n) in [
            ("get", requests.get),
            ("list", requests.list),
            ("watch", requests.watch),
            ("create", requests.create),
            ("update", requests.update),
            ("patch", requests.patch),
            ("delete", requests.delete),
        ] {
            api.push(vec![("verb", verb.to_string())], n as f64);
        }
        vec![synced, events, api]
    }
}

/// The API resource (plural) of a target kind.
pub fn resource(kind: WebhookKind) -> &'static str {
    kind.plural()
}

#[cfg(test)]
mod tests;
