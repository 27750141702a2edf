//! Running `certgen create` and `certgen patch` ([`crate::kwc`]): validate, read, plan, print
//! the plan, write. Every flag is checked before the first request; every object is read before
//! the first write. The orchestration, apart from the pure core in [`crate::kwc`] so that the
//! core never reaches the Kubernetes adapter.

use crate::cli::kwc::{KwcCreateArgs, KwcPatchArgs};
use crate::error::Error;
use crate::k8s::kwc as api;

use crate::kwc::plan::{
    CreatePlan, ObservedTarget, PatchPlan, SecretBundle, patch_bundle, plan_create, plan_patch,
};
use crate::kwc::request::{CreateRequest, PatchMode, PatchRequest};
use crate::outside::{CaBundleTargets, TargetFields, TargetObserved};
use crate::store::StoreError;

/// What a run printed: one line per object, for standard output.
pub type Report = Vec<String>;

/// `certgen create`.
pub async fn create(args: &KwcCreateArgs) -> Result<Report, Error> {
    let req = CreateRequest::from_flags(&args.flags())?;
    if args.print_config {
        return print_config(&req);
    }
    let client = crate::k8s::client_for(args.common.kubeconfig.as_deref(), None).await?;
    let observed = api::get_secret(&client, &req.namespace, &req.secret_name).await?;
    let now = crate::k8s::servertime::now().unwrap_or_else(time::OffsetDateTime::now_utc);
    let plan = plan_create(&req, &observed, now)?;
    let object = format!("Secret {}/{}", req.namespace, req.secret_name);
    match plan {
        CreatePlan::Renew {
            config,
            due,
            notes,
            rotate,
        } => {
            for note in &notes {
                tracing::warn!("{note}");
            }
            renew(&client, *config, &req, &due, rotate, args.common.dry_run).await
        }
        CreatePlan::Keep { notes } => {
            for note in &notes {
                tracing::warn!("{note}");
            }
            tracing::info!(secret = %object, "secret already exists");
            Ok(vec![format!(
                "{object}: exists and is usable; nothing written"
            )])
        }
        CreatePlan::Create(secret) => {
            let line = format!(
                "{object}: {} (type {}; keys {}, {}, {}; SANs {}; valid until {})",
                if args.common.dry_run {
                    "would be created"
                } else {
                    "created"
                },
                secret.type_,
                secret.keys.0,
                secret.keys.1,
                secret.keys.2,
                req.hosts.join(","),
                crate::timefmt::rfc3339(secret.not_after(now)),
            );
            if !args.common.dry_run {
                // The keys are made here, when written: the plan holds none.
                let made = secret.issue(now)?;
                api::create_secret(&client, &made).await?;
                tracing::info!(secret = %object, action = "create", "created the secret");
            }
            Ok(vec![line])
        }
    }
}

/// `create --print-config`: the config certgen renews the Secret with, as YAML, for `check
/// --config`, the exporter and the metrics. Nothing is read or written.
fn print_config(req: &CreateRequest) -> Result<Report, Error> {
    let file = crate::kwc::plan::config_file(req, &req.secret_type).ok_or_else(|| {
        Error::Config(crate::config::ConfigError {
            source_name: "--secret-type".into(),
            message: format!(
                "{}: certgen renews Secrets of type Opaque or kubernetes.io/tls only",
                req.secret_type
            ),
        })
    })?;
    let yaml = serde_saphyr::to_string(&file).map_err(|e| {
        Error::Config(crate::config::ConfigError {
            source_name: "--print-config".into(),
            message: format!("the config does not serialize: {e}"),
        })
    })?;
    let header = format!(
        "# certgen's config for what `certgen create` manages in Secret {}/{}: the renewal windows,\n# layout and caBundle targets of its flags. Use it with `certgen check --config FILE`,\n# `certgen exporter --config FILE` or the chart's `config`; print it again when the flags change.",
        req.namespace, req.secret_name
    );
    Ok(std::iter::once(header)
        .chain(yaml.lines().map(str::to_string))
        .collect())
}

/// `create` on an existing Secret with `caBundle` targets: certgen's main job on the config
/// `plan_create` built, as a hook or CronJob runs it (staged, waiting at a gate within
/// `--timeout`, a cleanup gate further than 30 s left to the next run). Its report when it
/// planned or did anything; otherwise the line of a kept Secret.
async fn renew(
    client: &kube::Client,
    config: crate::config::Config,
    req: &CreateRequest,
    due: &[String],
    rotate: bool,
    dry_run: bool,
) -> Result<Report, Error> {
    let object = format!("Secret {}/{}", req.namespace, req.secret_name);
    if !due.is_empty() {
        tracing::info!(secret = %object, "due for renewal: {}", due.join("; "));
    }
    let options = renew_options(req, rotate, dry_run);
    let (report, failure) = super::cluster::job(client, config, options).await?;
    let acted = report.writes > 0
        || report.note.is_some()
        || report.secrets.iter().any(|e| e.action.writes());
    if let Some(e) = failure {
        // The report first, as the main job prints it: what was done before the failure.
        use std::io::Write as _;
        let _ = std::io::stdout()
            .lock()
            .write_all(report.to_text().as_bytes());
        return Err(e);
    }
    if !acted {
        return Ok(vec![format!(
            "{object}: exists and is usable; nothing written"
        )]);
    }
    // A dry run's report lists the caBundle writes its first step plans (the engine's).
    let lines: Vec<String> = report.to_text().lines().map(str::to_string).collect();
    Ok(lines)
}

/// How `create` runs certgen's main job on an existing Secret (`rotate`: its certificates
/// outlive `--validity`).
pub fn renew_options(
    req: &CreateRequest,
    rotate: bool,
    dry_run: bool,
) -> crate::config::RunOptions {
    crate::config::RunOptions {
        strategy: crate::config::Strategy::Staged,
        propagation_delay: req.renewal.propagation_delay,
        dry_run,
        // Certificates that outlive --validity move to a new CA, staged like any rotation. A
        // rotation already under way is resumed, never started again (`plan::Options::after`).
        overwrite: rotate,
        overwrite_why: crate::config::OverwriteWhy::OutlivesValidity(req.renewal.validity),
        poke: true,
        timeout: req.renewal.timeout,
        ..crate::config::RunOptions::default()
    }
}

/// `certgen patch`: the Secret read through kube-webhook-certgen's adapter, the targets
/// through the `caBundle` seam ([`crate::outside::CaBundleTargets`]), each by its name.
pub async fn patch(args: &KwcPatchArgs) -> Result<Report, Error> {
    let req = PatchRequest::from_flags(&args.flags())?;
    let client = crate::k8s::client_for(args.common.kubeconfig.as_deref(), None).await?;
    let observed = api::get_secret(&client, &req.namespace, &req.secret_name).await?;
    let bundle = patch_bundle(&req, &observed)?;
    let targets = crate::k8s::WebhookStore::exact(client.clone());
    let read = read_targets(&req, &targets).await?;
    let now = crate::k8s::servertime::now().unwrap_or_else(time::OffsetDateTime::now_utc);
    let plan = plan_targets(&req, &bundle, &read, now)?;
    // More than one write: every verb is checked before the first, so a missing one (partial
    // RBAC) stops the run with nothing written rather than after the first object. One write
    // is its own check.
    if plan.writes.len() > 1 && !args.common.dry_run {
        let verb = match req.mode {
            PatchMode::Patch => "patch",
            PatchMode::Update => "update",
        };
        for w in &plan.writes {
            let (kind, name) = (w.target.kind, w.target.name.as_str());
            if crate::k8s::may(&client, verb, kind, Some(name)).await == Some(false) {
                return Err(crate::k8s::refused_before_writing(verb, kind, name).into());
            }
        }
    }
    write_targets(&req, &bundle, &plan, &read, &targets, args.common.dry_run).await
}

/// Reads every target of `patch`, in order, before any is written.
pub async fn read_targets(
    req: &PatchRequest,
    targets: &dyn CaBundleTargets,
) -> Result<Vec<TargetObserved>, Error> {
    let mut read = Vec::with_capacity(req.targets.len());
    for t in &req.targets {
        read.push(targets.read(t.kind, &t.name).await?);
    }
    Ok(read)
}

/// `patch`'s plan from what [`read_targets`] read.
pub fn plan_targets(
    req: &PatchRequest,
    bundle: &SecretBundle,
    read: &[TargetObserved],
    now: time::OffsetDateTime,
) -> Result<PatchPlan, Error> {
    let observed: Vec<_> = req
        .targets
        .iter()
        .cloned()
        .zip(read.iter().map(ObservedTarget::from))
        .collect();
    let mut plan = plan_patch(req, bundle, &observed, now)?;
    // An update writes certgen's mark of the bundle and its record of undos as the engine's
    // writes do, planned here from the read (a server-side apply would own them, and drop
    // the record on the next apply that leaves it unchanged: it writes neither).
    if req.mode == PatchMode::Update {
        for w in &mut plan.writes {
            let at = req.targets.iter().position(|t| *t == w.target);
            if let Some(TargetObserved::Present(target)) = at.and_then(|i| read.get(i)) {
                w.annotations =
                    crate::attribution::target_annotations(target, Some(&w.bundle), now);
            }
        }
    }
    Ok(plan)
}

/// Makes `plan`'s writes (each fenced by its read, or a server-side apply with
/// `--patch-mode patch`) and says what it did, one line per target; a dry run says what it
/// would write.
pub async fn write_targets(
    req: &PatchRequest,
    bundle: &SecretBundle,
    plan: &PatchPlan,
    read: &[TargetObserved],
    targets: &dyn CaBundleTargets,
    dry_run: bool,
) -> Result<Report, Error> {
    let mut report = Vec::new();
    let mut written: Vec<String> = Vec::new();
    for w in &plan.writes {
        let mut changes = w.changes.join(", ");
        if w.keeps_prior {
            changes.push_str(&prior_note(bundle, req.propagation_delay));
        }
        if dry_run {
            report.push(format!("{}: would write {changes}", w.target.describe()));
            continue;
        }
        let index = req
            .targets
            .iter()
            .position(|t| *t == w.target)
            .expect("every write is of a target read");
        let TargetObserved::Present(target) = &read[index] else {
            unreachable!("a write is of a present target")
        };
        let fields = TargetFields {
            failure_policy: plan.failure_policy,
            verify_tls: true,
            annotations: w.annotations.clone(),
        };
        let result = match req.mode {
            PatchMode::Patch => targets.apply(target, &w.bundle, fields).await,
            PatchMode::Update => match targets.put(target, &w.bundle, fields).await {
                Ok(_) => Ok(()),
                Err(StoreError::Conflict { .. }) => Err(StoreError::Conflict {
                    what: w.target.describe(),
                    detail: "it changed after certgen read it; re-run".into(),
                }),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            // What was written before the failure, as a successful run prints it; the error
            // names it too (exit 5).
            use std::io::Write as _;
            let done: String = report.iter().map(|l| format!("{l}\n")).collect();
            let _ = std::io::stdout()
                .lock()
                .write_all(crate::text::printable(&done).as_bytes());
            return Err(Error::from(e).after(written.clone()));
        }
        written.push(w.target.describe());
        tracing::info!(object = %w.target.describe(), action = "patch", changes = %changes, "patched");
        report.push(format!("{}: wrote {changes}", w.target.describe()));
    }
    for (t, by) in &plan.injected {
        let line = crate::certmanager::injected_note(&t.describe(), by);
        tracing::warn!("{line}");
        report.push(line);
    }
    for (t, keeps_prior) in &plan.unchanged {
        let note = if *keeps_prior {
            prior_note(bundle, req.propagation_delay)
        } else {
            String::new()
        };
        report.push(format!(
            "{}: already holds the Secret's CA{note}; nothing written",
            t.describe()
        ));
    }
    Ok(report)
}

/// Says until when a `caBundle` keeps the prior CA, and what drops it.
fn prior_note(secret: &SecretBundle, delay: std::time::Duration) -> String {
    let until = secret
        .written_at
        .map(|at| at + time::Duration::try_from(delay).unwrap_or(time::Duration::ZERO))
        .map_or("later".to_string(), crate::timefmt::rfc3339);
    format!(
        " (keeps the prior CA beside the Secret's: the webhook may serve a certificate it signed until {until}; a patch after that drops it)"
    )
}
