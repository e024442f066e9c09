-- scrun.lua for Slurm's scrun (23.02 and newer) with hydria as the OCI runtime: put this file
-- beside slurm.conf on every node where users run `podman` or `docker` with scrun as their runtime
-- (docs/slurm.md). `hydria oci scrun-lua` prints it.
--
-- scrun calls slurm_scrun_stage_in once the job's nodes are allocated, before it runs
-- `srun --container=BUNDLE` there, and slurm_scrun_stage_out when the container has ended. Both
-- leave the bundle where podman made it: its storage (graphroot and runroot in storage.conf) must
-- be on a file system that the compute nodes mount at the same path, as Slurm's containers guide
-- advises, with the vfs driver (an overlay driver's root file system exists only inside podman's
-- own mount namespace). hydria runs podman's config.json as it is: its capabilities, masked and
-- read-only paths and seccomp profile included; nothing needs to be removed from it here.

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	slurm.log_debug(string.format("hydria: container %s runs from %s, where podman made it", id, bundle))
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file,
                               job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
