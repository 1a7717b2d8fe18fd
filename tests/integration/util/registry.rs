//! An image registry of the test's own: Debian's `docker-registry` (the
//! CNCF distribution registry 2.8; `scripts/deps.sh` installs it), plain
//! HTTP on [`ADDRESS`] inside the network namespace of the test's engine.
//! Each private engine has a network namespace of its own, so the port is
//! the test's alone, and the engine reaches the registry as a node reaches
//! one: images are pushed to it and pulled from it by the engines
//! themselves, never written by hand. Its storage is a directory of the
//! test's, gone with it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Missing;
use super::containerd::PrivateContainerd;

/// Where the registry listens, in the engine's network namespace. Docker
/// treats 127.0.0.0/8 as an insecure (plain HTTP) registry by default.
pub const ADDRESS: &str = "127.0.0.1:5000";

/// How long the registry has to answer `GET /v2/`.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running registry; stopped (SIGKILL) and its storage removed on drop.
pub struct Registry {
    /// [`ADDRESS`], where it listens.
    address: &'static str,
    child: Child,
    dir: tempfile::TempDir,
    /// The network namespace it serves in: `/proc/<engine pid>/ns/net`.
    netns: String,
}

impl Registry {
    /// Starts a registry in the network namespace of process `pid` (the
    /// test's engine), and waits until `/v2/` answers.
    ///
    /// # Errors
    /// `docker-registry` is not installed: what to run.
    ///
    /// # Panics
    /// When it does not answer within 30 s; the message holds its log.
    pub fn start_beside(pid: u32) -> Result<Self, Missing> {
        let binary = which("docker-registry").ok_or_else(|| {
            Missing(
                "no docker-registry on PATH: the image tests pull through a registry of their own; \
                 run scripts/deps.sh (it installs Debian's docker-registry binary)"
                    .to_owned(),
            )
        })?;
        let dir = tempfile::Builder::new()
            .prefix("sp-registry-")
            .tempdir()
            .expect("the registry's directory");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\n\
                 log: {{level: warn}}\n\
                 storage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\n\
                 http: {{addr: \"{ADDRESS}\"}}\n",
                dir.path().join("storage").display()
            ),
        )
        .expect("write the registry's config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("the log");
        let netns = format!("/proc/{pid}/ns/net");
        let child = Command::new("nsenter")
            .arg(format!("--net={netns}"))
            .arg(&binary)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log"))
            .stderr(log)
            .spawn()
            .expect("run nsenter (util-linux) docker-registry serve");
        let mut registry = Self {
            address: ADDRESS,
            child,
            dir,
            netns,
        };
        registry.await_answer();
        Ok(registry)
    }

    /// Waits until `GET /v2/` answers 200 in the engine's namespace.
    fn await_answer(&mut self) {
        let begun = Instant::now();
        loop {
            if self.get("/v2/").is_some_and(|(status, _)| status == 200) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("docker-registry exited ({status}): {}", self.log());
            }
            assert!(
                begun.elapsed() < START_TIMEOUT,
                "docker-registry did not answer within {START_TIMEOUT:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `GET path` on the registry, from its network namespace: the status
    /// and body, or `None` when it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let netns = self.netns.clone();
        let path = path.to_owned();
        let address: SocketAddr = self.address.parse().expect("an address");
        std::thread::spawn(move || {
            // This thread alone enters the engine's network namespace.
            let ns = std::fs::File::open(&netns).ok()?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
            super::node::http_get(address, &path).ok()
        })
        .join()
        .expect("ask the registry")
    }

    /// The tags the registry serves for `repository` (`acc/bb`); none when
    /// it knows no such repository.
    pub fn tags(&self, repository: &str) -> Vec<String> {
        let Some((200, body)) = self.get(&format!("/v2/{repository}/tags/list")) else {
            return Vec::new();
        };
        let list: serde_json::Value = serde_json::from_str(&body).expect("a tag list");
        list["tags"]
            .as_array()
            .map(|tags| {
                tags.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A command run in the registry's (the engine's) network namespace:
    /// a client that fetches itself (`ctr images pull`) reaches it there.
    pub fn in_netns(&self, program: &Path) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.netns)).arg(program);
        cmd
    }

    /// `ctr` of `engine`'s release at `namespace` with `args`, run in the
    /// registry's network namespace (`ctr` fetches and pushes itself); its
    /// stdout. Panics with its output when it fails.
    pub fn ctr(&self, engine: &PrivateContainerd, namespace: &str, args: &[&str]) -> String {
        let ctr = engine.ctr(namespace);
        let output = self
            .in_netns(Path::new(ctr.get_program()))
            .args(ctr.get_args())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ctr in the engine's network namespace");
        assert!(
            output.status.success(),
            "ctr {} failed: {}{}\nregistry log: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.log()
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Puts an image named `name` (on this registry: `127.0.0.1:5000/…`)
    /// in the registry and none of it in `engine`: a busybox image of its
    /// own content (`extra`) is imported, pushed, and removed with its
    /// content. Its manifest digest, which a pull brings back.
    pub fn push_and_forget(
        &self,
        engine: &PrivateContainerd,
        namespace: &str,
        name: &str,
        extra: &str,
    ) -> String {
        let imported = engine.import_image_with_extra(namespace, name, extra);
        self.ctr(engine, namespace, &["images", "push", "--plain-http", name]);
        self.ctr(engine, namespace, &["images", "rm", "--sync", name]);
        imported.digest
    }

    /// Lets `engine`'s CRI plugin pull from this registry, over plain
    /// HTTP: a `hosts.toml` for it under the plugin's registry
    /// `config_path` (`<engine>/certs.d`).
    pub fn serve_cri(&self, engine: &PrivateContainerd) {
        let address = self.address;
        let hosts = engine.path(&format!("certs.d/{address}"));
        std::fs::create_dir_all(&hosts).expect("the registry's hosts directory");
        std::fs::write(
            hosts.join("hosts.toml"),
            format!(
                "server = \"http://{address}\"\n\n[host.\"http://{address}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )
        .expect("write hosts.toml");
    }

    /// `name` pulled by CRI (`PullImage`), as kubelet pulls: containerd
    /// fetches it itself, through [`Self::serve_cri`]'s hosts.
    pub async fn cri_pull(&self, engine: &PrivateContainerd, name: &str) {
        use k8s_cri::v1::image_service_client::ImageServiceClient;
        use k8s_cri::v1::{ImageSpec, PullImageRequest};
        ImageServiceClient::new(engine.channel())
            .pull_image(PullImageRequest {
                image: Some(ImageSpec {
                    image: name.to_owned(),
                    ..ImageSpec::default()
                }),
                ..PullImageRequest::default()
            })
            .await
            .unwrap_or_else(|e| panic!("CRI pulls {name}: {e}\nregistry log: {}", self.log()));
    }

    /// An image named `name` (on this registry) in `engine`'s `k8s.io` as
    /// kubelet would have it: pushed from an import of its own content
    /// (`extra`), forgotten, and pulled by CRI. Its manifest digest.
    pub async fn pulled_by_cri(
        &self,
        engine: &PrivateContainerd,
        name: &str,
        extra: &str,
    ) -> String {
        let digest = self.push_and_forget(engine, "k8s.io", name, extra);
        self.serve_cri(engine);
        self.cri_pull(engine, name).await;
        digest
    }

    /// The registry's log, for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name` on `PATH`, as a shell finds it.
fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}
