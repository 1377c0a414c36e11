//! Asking an actor without waiting on one that has stopped for good. A leaf.
//!
//! A plain kameo ask can wait for ever on an actor that stops as the message is
//! sent. tokio's bounded channel (kameo's mailbox) takes a slot, then pushes the
//! message; if the mailbox's receiver is dropped between the two (a passivating run
//! actor stops, and its supervisor drops the mailbox), the message lands in a
//! channel nobody reads. Since it holds a reference to the actor, which is a sender
//! of that very channel, it is never dropped, and its answer never comes. Seen in
//! about one of 60,000 signals racing passivation (`tests/continue_as_new.rs`).

use kameo::Actor;
use kameo::actor::ActorRef;
use kameo::error::SendError;
use kameo::message::Message;
use kameo::reply::Reply;

/// What an ask of `A` with `M` answers.
type Answer<A, M> = Result<
    <<A as Message<M>>::Reply as Reply>::Ok,
    SendError<M, <<A as Message<M>>::Reply as Reply>::Error>,
>;

/// Asks `actor`, and gives up with [`SendError::ActorStopped`] once its mailbox is
/// gone without an answer.
///
/// An answer sent before the actor stopped is always taken: it is polled first, and
/// the actor answers before its mailbox is dropped. A mailbox that moves on to a
/// restarted actor stays open, so that actor's answer is waited for. A message given
/// up on was never handled; the caller may send it again.
pub(crate) async fn ask<A, M>(actor: &ActorRef<A>, msg: M) -> Answer<A, M>
where
    A: Actor + Message<M>,
    M: Send + 'static,
{
    let answer = actor.ask(msg);
    tokio::select! {
        biased;
        answer = answer => answer,
        () = actor.mailbox_sender().closed() => Err(SendError::ActorStopped),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use kameo::actor::Spawn;
    use kameo::error::Infallible;
    use kameo::message::Context;
    use kameo::reply::{DelegatedReply, ReplySender};

    use super::*;

    /// Keeps the answer of every `Swallow` it handles, unsent, and stops: the
    /// state of a message stranded in a dropped mailbox (never answered, never
    /// dropped), made on purpose.
    struct Mute {
        kept: Kept,
    }

    /// The answers a `Mute` kept.
    type Kept = Arc<Mutex<Vec<ReplySender<u32>>>>;

    impl Actor for Mute {
        type Args = Self;
        type Error = Infallible;

        async fn on_start(me: Self, _: ActorRef<Self>) -> Result<Self, Infallible> {
            Ok(me)
        }
    }

    struct Swallow;
    struct Echo(u32);

    impl Message<Swallow> for Mute {
        type Reply = DelegatedReply<u32>;

        async fn handle(
            &mut self,
            _: Swallow,
            ctx: &mut Context<Self, Self::Reply>,
        ) -> Self::Reply {
            let (delegated, sender) = ctx.reply_sender();
            if let Some(sender) = sender {
                self.kept
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(sender);
            }
            ctx.stop();
            delegated
        }
    }

    impl Message<Echo> for Mute {
        type Reply = u32;

        async fn handle(&mut self, Echo(n): Echo, ctx: &mut Context<Self, u32>) -> u32 {
            // Answers, then stops: the answer still wins.
            ctx.stop();
            n
        }
    }

    fn mute() -> (ActorRef<Mute>, Kept) {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let actor = Mute::spawn(Mute { kept: kept.clone() });
        (actor, kept)
    }

    #[tokio::test]
    async fn an_ask_left_unanswered_by_a_stopped_actor_ends() {
        let (actor, kept) = mute();
        let answer = ask(&actor, Swallow).await;
        assert!(matches!(answer, Err(SendError::ActorStopped)), "{answer:?}");
        // The answer was kept, not dropped: a plain ask would still be waiting.
        assert_eq!(kept.lock().unwrap_or_else(|p| p.into_inner()).len(), 1);
    }

    #[tokio::test]
    async fn an_answer_sent_before_the_stop_is_taken() {
        let (actor, _) = mute();
        assert_eq!(ask(&actor, Echo(7)).await.ok(), Some(7));
        actor.wait_for_shutdown().await;
    }

    #[tokio::test]
    async fn an_ask_of_a_stopped_actor_fails_at_once() {
        let (actor, _) = mute();
        assert_eq!(ask(&actor, Echo(1)).await.ok(), Some(1));
        actor.wait_for_shutdown().await;
        assert!(ask(&actor, Echo(2)).await.is_err());
    }
}
