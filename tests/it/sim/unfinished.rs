//! A run that cannot settle stops after its last allowed step (`rotation::MAX_STEPS`) with exit 3
//! and the promise that nothing is left half-trusted; the pairs oracle checks that promise.
//!
//! The only way to keep certgen stepping is a writer that undoes its work: here, right after
//! each of certgen's writes to Secret `envoy`, another tool puts that Secret's old bundle back,
//! so every step finds the trust phase unfinished and writes it again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certgen::lock;
use certgen::rotation::{self, Invocation};
use certgen::secret::{Observed, SecretWrite};
use certgen::store::{SecretStore, StoreError};
use time::OffsetDateTime;

use super::{Faults, RunSpec, Session, World, check_pairs, config, options, run, runtime};

/// Certgen's store, with a tool that restores `envoy`'s `ca.crt` after every write to it.
struct Undoing {
    session: Session,
    world: Arc<Mutex<World>>,
    bundle: Vec<u8>,
    undone: Mutex<usize>,
}

impl SecretStore for Undoing {
    fn describe(&self) -> String {
        self.session.describe()
    }

    fn object(&self, name: &str) -> String {
        self.session.object(name)
    }

    fn now(&self) -> OffsetDateTime {
        self.session.now()
    }

    fn writer_now(&self) -> OffsetDateTime {
        self.session.writer_now()
    }

    async fn get(&self, name: &str) -> Result<Observed, StoreError> {
        self.session.get(name).await
    }

    async fn put(&self, write: &SecretWrite) -> Result<(), StoreError> {
        self.session.put(write).await?;
        if write.name == "envoy" && write.data.contains_key("ca.crt") {
            let data = BTreeMap::from([("ca.crt".to_string(), self.bundle.clone())]);
            self.world
                .lock()
                .unwrap()
                .seed("envoy", "kubernetes.io/tls", data);
            *self.undone.lock().unwrap() += 1;
        }
        Ok(())
    }
}

#[test]
fn a_run_whose_work_is_undone_stops_after_its_last_step_with_exit_3() {
    runtime().block_on(async {
        let config = config();
        let world = World::new();
        let steady = run(&world, &config, 1, RunSpec::default()).await;
        assert_eq!(steady.code, 0, "{}", steady.message);
        let bundle = world.lock().unwrap().get("envoy").unwrap().data["ca.crt"].clone();
        tokio::time::advance(Duration::from_secs(3600)).await;

        let spec = RunSpec {
            overwrite: true,
            ..RunSpec::default()
        };
        let store = Undoing {
            session: Session::new(&world, 2, Faults::default()),
            world: world.clone(),
            bundle,
            undone: Mutex::new(0),
        };
        let invocation = Invocation {
            config: &config,
            options: options(&spec),
            deadline: tokio::time::Instant::now() + Duration::from_secs(3600),
            workloads: None,
            endpoints: None,
            webhooks: None,
            trust_bundles: None,
            pods: None,
            lock: lock::Target::None,
        };
        let (code, message) = match Box::pin(rotation::run(&store, invocation)).await {
            Ok((_, Some(e))) | Err(e) => (e.code(), e.to_string()),
            Ok((report, None)) => panic!("the run finished: {}", report.to_text()),
        };
        assert_eq!(code, 3, "{message}");
        assert!(
            message.contains(&format!("stopped after {} steps", rotation::MAX_STEPS)),
            "{message}"
        );
        // Every step wrote `envoy`'s bundle again (and the tool undid it each time).
        assert_eq!(
            *store.undone.lock().unwrap(),
            rotation::MAX_STEPS,
            "{message}"
        );
        // Nothing half-trusted: no leaf was moved to the new CA while a bundle lacked it.
        let world = world.lock().unwrap();
        let end = world.true_now() + time::Duration::days(1);
        check_pairs(&world, end).unwrap();
        let log = &world.log;
        assert!(
            log.iter().filter(|(run, _)| *run == 2).count() >= rotation::MAX_STEPS,
            "{log:?}"
        );
    });
}
