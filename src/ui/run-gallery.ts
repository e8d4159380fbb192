/**
 * The galleries of the runs a ui shows, one handler per run (review/review-server.ts), built again
 * when the gallery's page is asked and the run's journal has changed since its build: a reload of a
 * running run's gallery shows the cells finished since. A run whose journal stays as it was, a
 * finished one, is built once. The page's data files, the run's files and the decisions are
 * answered by the handler of the last build, the one the page was built with; a page opened before
 * a later build finds its data files of another build by their signatures, and says to reload.
 * Requests at once share one build, and a build is not started while one is under way; a build
 * that failed is kept until the journal changes. All of a run's handlers write decisions through one store.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { reviewHandler, type ReviewHandler } from '../review/review-server.js';
import { ReviewStore } from '../review/review-store.js';
import { GALLERY_FILE } from '../gallery/write-gallery.js';
import { journalSignature, type UiRun } from './run-watch.js';

interface Gallery {
  /** The journal's signature when the build started. */
  signature: string;
  handler: Promise<ReviewHandler>;
  /** Set once the build has ended, built or failed. */
  settled: boolean;
}

export class RunGalleries {
  readonly #galleries = new Map<string, Gallery>();
  /**
   * One decision store per run, for as long as the ui runs: every build of the run's gallery
   * writes review.json through it, so a decision under way when a build is let go or replaced
   * never races one taken on the newer page.
   */
  readonly #stores = new Map<string, ReviewStore>();

  constructor(
    /** Galleries kept at once; the oldest is let go past it. */
    readonly max: number,
    /** What the ui adds to the page's head (its token). */
    readonly pageHead: string,
  ) {}

  /** Answers `pathname` of the gallery of `run` (relative to the gallery: `/`, `/gallery-data/...`); false when it knows no such path. */
  async handle(run: UiRun, req: IncomingMessage, res: ServerResponse, pathname: string): Promise<boolean> {
    const page = req.method === 'GET' && (pathname === '/' || pathname === `/${GALLERY_FILE}`);
    return (await this.#handler(run, page)).handle(req, res, pathname);
  }

  #handler(run: UiRun, page: boolean): Promise<ReviewHandler> {
    const kept = this.#galleries.get(run.key);
    // A build under way is shared, whatever the journal did since: the next page asked after it rebuilds.
    if (kept !== undefined && (!page || !kept.settled)) return kept.handler;
    const signature = journalSignature(run.dir);
    // Built, or failed, from this very journal: the same answer (a failed build is tried again once the journal changes).
    if (kept !== undefined && kept.signature === signature) return kept.handler;
    let store = this.#stores.get(run.key);
    if (store === undefined) this.#stores.set(run.key, (store = new ReviewStore(run.dir)));
    const gallery: Gallery = {
      signature,
      settled: false,
      handler: reviewHandler(run.dir, {
        // The ui's access rules checked Origin and token before this route was asked.
        writeAllowed: () => true,
        pageHead: this.pageHead,
        store,
      }),
    };
    gallery.handler.then(
      () => (gallery.settled = true),
      () => (gallery.settled = true),
    );
    this.#galleries.delete(run.key);
    this.#galleries.set(run.key, gallery);
    if (this.#galleries.size > this.max) this.#galleries.delete(this.#galleries.keys().next().value as string);
    return gallery.handler;
  }
}
