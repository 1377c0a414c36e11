//! Deleting finished runs: [`AnyRun::delete`], and the retention policy's pass
//! ([`Host::enforce_retention`]) with [`Host::reclaim_space`].

use crate::{AnyRun, Host, Result};

impl AnyRun {
    /// Deletes a finished run (completed, failed or cancelled): its log, every
    /// segment of it, its metadata and its index entries, in one write; afterwards
    /// the run is unknown ([`Error::UnknownRun`](crate::Error::UnknownRun)) and its
    /// id can be used again. Its child runs are not deleted. The disk space comes
    /// back when the store compacts ([`Host::reclaim_space`]).
    ///
    /// # Errors
    /// [`Error::InvalidState`](crate::Error::InvalidState) for a run that has not
    /// finished (running, suspended, parked or paused: cancel it first),
    /// [`Error::UnknownRun`](crate::Error::UnknownRun),
    /// [`Error::Storage`](crate::Error::Storage),
    /// [`Error::Shutdown`](crate::Error::Shutdown). Nothing is deleted then.
    pub async fn delete(&self) -> Result<()> {
        Ok(self.core()?.delete(&self.run_id).await?)
    }
}

impl Host {
    /// Runs one pass of the host's retention policy
    /// ([`HostBuilder::retention`](crate::HostBuilder::retention)) now: deletes the
    /// finished runs that ended longer ago than the policy keeps them, at most
    /// [`Retention::per_pass`](crate::Retention) of each kind of end (call again to
    /// go on). Returns how many runs it deleted: fewer than `per_pass` of a kind
    /// when no more of that kind are due, or when the pass has read eight times
    /// `per_pass` runs that are not due yet (created before the cutoff, ended
    /// after it), where the next pass goes on. The background pass does the same every
    /// [`Retention::every`](crate::Retention); on a store shared by several hosts,
    /// one of them passes at a time (the one leasing the partition of the key
    /// `reel.retention`), while this call passes on whichever host it is made.
    ///
    /// # Errors
    /// [`Error::Storage`](crate::Error::Storage), [`Error::Shutdown`](crate::Error::Shutdown).
    pub async fn enforce_retention(&self) -> Result<usize> {
        let now = self.core().clock().now_ms();
        Ok(self.core().enforce_retention(now).await?)
    }

    /// Gives the disk space of deleted runs back now: the store flushes and
    /// compacts (its cost grows with the size of the store; the retention pass
    /// does it at most once an hour). With fjall, the write-ahead journal is the
    /// exception: its active file is replaced only once it passes 64 MB, so up to
    /// that much of recently written (and deleted) data stays in it until then.
    ///
    /// # Errors
    /// [`Error::Storage`](crate::Error::Storage), [`Error::Shutdown`](crate::Error::Shutdown).
    pub async fn reclaim_space(&self) -> Result<()> {
        Ok(self.core().reclaim().await?)
    }
}
