/** §4.1: request status and cancellation. */
import { baseUrl, platformUrl, segment, type ApiContext, type CallContext } from './context.js';
import { GenpipeError } from './errors.js';
import { RequestStatus } from './wire.js';

export class RequestsApi {
  constructor(private readonly ctx: ApiContext) {}

  /** `GET {base_url}/requests/{request_id}/status`. */
  async status(requestId: string, options: CallContext = {}): Promise<RequestStatus> {
    const result = await this.ctx.transport.call({
      method: 'GET',
      url: baseUrl(this.ctx, `/requests/${segment(requestId)}/status`),
      auth: 'key',
      schema: RequestStatus,
      safety: { kind: 'safe' },
      requestId,
      signal: options.signal,
    });
    return result.data;
  }

  /**
   * Cancels a request through its `cancel_url` (or the platform path of that shape, §4.1).
   * The spec does not show the method; the public docs say POST, answered 202 while the request is
   * queued and 400 once it has started. Returns true when the service accepted the cancel, false
   * when the request was past cancelling.
   */
  async cancel(requestIdOrCancelUrl: string, options: CallContext = {}): Promise<boolean> {
    const url = requestIdOrCancelUrl.includes('/')
      ? this.#checkedCancelUrl(requestIdOrCancelUrl)
      : platformUrl(this.ctx, `/requests/${segment(requestIdOrCancelUrl)}/cancel`);
    try {
      await this.ctx.transport.call({ method: 'POST', url, auth: 'key', safety: { kind: 'safe' }, signal: options.signal });
      return true;
    } catch (error) {
      if (error instanceof GenpipeError && error.code === 'bad_request') return false;
      throw error;
    }
  }

  /** Credentials are only sent to the configured addresses, whatever a response says. */
  #checkedCancelUrl(url: string): string {
    const origin = new URL(url).origin;
    const allowed = [this.ctx.config.platformUrl, this.ctx.config.baseUrl].map((u) => new URL(u).origin);
    if (!allowed.includes(origin)) {
      throw new GenpipeError(
        'invalid_input',
        `The cancel_url ${url} is not on the configured platform address; refusing to send credentials there.`,
      );
    }
    return url;
  }
}
